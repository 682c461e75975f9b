"""The ``blurry`` flag's recall on planted Gaussian blurs and false positives on clean
photos, and what the quality thumbnails cost the shard step's finish graph.

Clean photos: the first ``--num_images`` web sample photos
(``sample_photos.ensure_photos``: ``<work_dir>/photos_<N>``, made if missing; 2,000 are
/work/bench_data/photos_2000, 320-1280 px). Planted blurs: a copy of each clean photo,
decoded by Pillow and blurred with ``ImageFilter.GaussianBlur(sigma * min(width,
height) / 224)`` (Pillow's radius is the Gaussian's standard deviation) at its own
size, so that the blur is ``sigma`` px of the 224 px stored image (the shorter side is
resized to 224, then centre-cropped), then saved as JPEG quality 90 as the photos
are; one set per ``--sigmas`` value.

Every file goes through the job's own ops (``etl.images.batches.FinishImages``:
TensorFlow's decode at the DCT scale, resize, crop, the thumbnails) at the default
preprocessing (224 px), then ``quality.measure_quality`` and ``quality.image_flags``
at ``FlagThresholds()``. Printed: ``blurry`` among the clean photos (false positives)
and among each planted set (recall), the lowest sharpness of a clean photo the rule
applies to (contrast >= its minimum), and the finish graph's CPU time per photo with
and without the statistics (``quality``: the sharpness's luma; the 32 px thumbnails
are taken either way, for the duplicate signatures, so "without" is the graph as it
was before the luma) — process CPU time of the graph calls on the clean photos'
decoded pixels, ``--rounds`` alternating rounds, median.

Usage: python -m scripts.benchmarks blur_flag --work_dir /work/bench_data \
           [--num_images 2000] [--sigmas 2 3 6 12] [--rounds 3]
"""

from __future__ import annotations

import argparse
import datetime
import glob
import io
import os
import pathlib
import statistics
import time

import numpy as np
from PIL import Image, ImageFilter

from etl.images import batches, quality
from etl.images.preprocessing import ImagePreprocessing
from scripts.benchmarks import harness, sample_photos

BENCHMARK = harness.Benchmark(
    name="blur_flag",
    measures="the blurry flag on planted Gaussian blurs and clean web photos, and its CPU",
    quick=("--work_dir", "{quick_dir}/photos", "--num_images", "20", "--sigmas", "3",
           "--rounds", "1", "--out", "{quick_dir}/blur_flag.json"),
)

STORED_SIZE = 224
BATCH = 32


def blurred_copy(data: bytes, sigma: float) -> bytes:
    """``data``'s photo blurred by ``sigma`` px of its 224 px stored image, as JPEG."""
    with Image.open(io.BytesIO(data)) as image:
        rgb = image.convert("RGB")
    radius = sigma * min(rgb.size) / STORED_SIZE
    buffer = io.BytesIO()
    rgb.filter(ImageFilter.GaussianBlur(radius)).save(buffer, "JPEG", quality=90)
    return buffer.getvalue()


def measure(finish: batches.FinishImages, files: list[bytes]) -> list[dict]:
    """Each file's quality facts, as the job takes them (no ``odd_size`` range)."""
    facts = []
    for start in range(0, len(files), BATCH):
        data = files[start:start + BATCH]
        done = finish(finish.decode(data), data)
        measured = quality.measure_quality(np.stack([d.quality for d in done]),
                                           np.stack([d.luma for d in done]))
        facts += [{"width": 1, "height": 1, "mode": "RGB", **m.to_dict()} for m in measured]
    return facts


def blurry(facts: list[dict]) -> list[bool]:
    return ["blurry" in quality.image_flags(f, None) for f in facts]


def graph_cpu_ms(files: list[bytes], rounds: int) -> dict[str, float]:
    """Median CPU ms per photo of the finish graph, with and without the statistics."""
    config = ImagePreprocessing()
    graphs = {"with statistics": batches.FinishImages(config, thumbnails=True, quality=True),
              "without statistics": batches.FinishImages(config, thumbnails=True)}
    decoded = [(graphs["with statistics"].decode(files[s:s + BATCH]), files[s:s + BATCH])
               for s in range(0, len(files), BATCH)]
    times: dict[str, list[float]] = {name: [] for name in graphs}
    for _ in range(rounds):
        for name, finish in graphs.items():
            finish(*decoded[0])  # warm
            start = time.process_time()
            for pixels, data in decoded:
                finish(pixels, data)
            times[name].append((time.process_time() - start) / len(files) * 1e3)
    return {name: statistics.median(values) for name, values in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work_dir", required=True)
    parser.add_argument("--num_images", type=int, default=2000)
    parser.add_argument("--sigmas", type=float, nargs="+", default=[2.0, 3.0, 6.0, 12.0])
    parser.add_argument("--rounds", type=int, default=3)
    harness.add_result_flags(parser, "blur_flag", "web_<num_images>")
    args = parser.parse_args()
    os.makedirs(args.work_dir, exist_ok=True)
    tree = sample_photos.ensure_photos(args.work_dir, args.num_images)
    paths = sorted(glob.glob(os.path.join(tree, "**", "*.jpg"), recursive=True))
    files = [pathlib.Path(path).read_bytes() for path in paths]
    finish = batches.FinishImages(ImagePreprocessing(), thumbnails=True, quality=True)
    clean = measure(finish, files)
    flagged = [path for path, hit in zip(paths, blurry(clean), strict=True) if hit]
    t = quality.FlagThresholds()
    applies = sorted(f["sharpness"] for f in clean if f["contrast"] >= t.blurry_min_contrast)
    result: dict = {"date": datetime.date.today().isoformat(), "machine": harness.machine(),
                    "code": harness.code_version(), "sigmas_px_at_224": args.sigmas,
                    "clean": len(files), "clean_flagged": len(flagged),
                    "lowest_clean_sharpness": applies[:5], "recall": {}}
    print(f"clean photos: {len(files)}, flagged blurry: {len(flagged)} {flagged[:10]}; "
          f"lowest sharpness where the rule applies ({len(applies)}): {applies[:5]}; "
          f"threshold {t.blurry_sharpness}")
    for sigma in args.sigmas:
        facts = measure(finish, [blurred_copy(data, sigma) for data in files])
        planted = blurry(facts)
        quartiles = np.percentile([f["sharpness"] for f in facts], [25, 50, 75]).round(4)
        result["recall"][f"{sigma:g}"] = sum(planted) / len(planted)
        print(f"planted Gaussian blur sigma {sigma:g} px at 224 px: {sum(planted)} of "
              f"{len(planted)} flagged blurry (recall {sum(planted) / len(planted):.3f}); "
              f"sharpness quartiles {quartiles.tolist()}")
    result["finish_graph_cpu_ms_per_photo"] = graph_cpu_ms(files, args.rounds)
    for name, ms in result["finish_graph_cpu_ms_per_photo"].items():
        print(f"finish graph {name}: {ms:.3f} ms CPU per photo")
    harness.write_result(args.out, args.setting or f"web_{args.num_images}", result, CHART)


CHART = harness.Chart("share flagged blurry", lambda result: {
    "clean photos": result["clean_flagged"] / result["clean"],
    **{f"Gaussian {sigma} px": share for sigma, share in result["recall"].items()}},
    unit="share of photos flagged", value_format=".2f")


if __name__ == "__main__":
    main()
