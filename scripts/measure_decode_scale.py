"""Fidelity against speed of the JPEG decode scale: why the image job decodes a JPEG at
the DCT scale that keeps its shorter side at least twice ``--image_size``.

For each margin M (decode at the largest scale 1/r, r in 1, 2, 4, 8, whose shorter side
``ceil(shorter / r)`` is still at least ``M × image_size``; "full" never scales), every
photo goes through the job's own ops after the decode (``etl.images.codec.finish``:
antialiased bilinear resize, EXIF turn, centre crop) and is compared with an
independent reference: Pillow decodes the whole photo at full size, applies
``exif_transpose``, resizes the shorter side to ``image_size`` (antialiased bilinear)
and crops the centre. Reported per margin: PSNR before the JPEG encode (raw pixels:
what the scale itself costs; an exact match counts as 100 dB) and after the stored
encode (quality 95: what a reader sees), mean and minimum over the photos, and one
core's CPU time per photo for the decode and the ops (median of ``--rounds``).

Usage (camera-size photos from scripts/sample_photos.py, then web-size ones):
    python scripts/measure_decode_scale.py --input /work/bench_data/camera12_60 \\
        --out docs/benchmarks/decode_scale_camera12.json
"""

from __future__ import annotations

import argparse
import io
import os
import statistics
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf
from bench_common import add_photo_folder_flags, code_commit, machine, photo_files, write_json
from PIL import Image, ImageOps

from etl.images import codec
from pipelines.images import run_ops_on_one_thread_each
from reader import contract

MARGINS: tuple[float | None, ...] = (1.0, 2.0, 4.0, None)  # None: full-size decode.


def reference(data: bytes, size: int) -> np.ndarray:
    """Full decode, upright, shorter side to ``size`` (antialiased bilinear), centre crop."""
    with Image.open(io.BytesIO(data)) as image:
        image = ImageOps.exif_transpose(image).convert("RGB")
    width, height = image.size
    shorter = min(width, height)
    scaled = (max(size, (width * size + shorter // 2) // shorter),
              max(size, (height * size + shorter // 2) // shorter))
    resized = image.resize(scaled, Image.Resampling.BILINEAR)
    left, top = (resized.width - size) // 2, (resized.height - size) // 2
    return np.asarray(resized.crop((left, top, left + size, top + size)), np.float64)


# PSNR of an exact match (a photo whose shorter side is already image_size).
EXACT_PSNR_DB = 100.0


def psnr(image: np.ndarray, ref: np.ndarray) -> float:
    mse = float(np.mean((image.astype(np.float64) - ref) ** 2))
    return min(EXACT_PSNR_DB, 10 * np.log10(255.0 ** 2 / mse)) if mse else EXACT_PSNR_DB


def make_ops(size: int, quality: int) -> dict[str, tf.types.experimental.GenericFunction]:
    """Decode at a given ratio + the job's ops (resized from the source's size, as
    the job does), stored raw or as JPEG."""
    def build(image_format: str, ratio: int):
        return tf.function(lambda data: codec.finish(
            tf.io.decode_jpeg(data, channels=3, ratio=ratio,
                              dct_method=codec.JPEG_DCT_METHOD),
            data, size, image_format, quality,
            source_shape=tf.image.extract_jpeg_shape(data)[:2], ratio=ratio),
            input_signature=[tf.TensorSpec([], tf.string)])
    return {f"{fmt}/{r}": build(fmt, r) for fmt in (contract.RAW, contract.JPEG)
            for r in codec.JPEG_DECODE_RATIOS}


def main() -> None:
    run_ops_on_one_thread_each()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_photo_folder_flags(parser, max_photos=60, rounds=3)
    parser.add_argument("--jpeg_quality", type=int, default=95)
    args = parser.parse_args()

    photos = [open(path, "rb").read() for path in photo_files(parser, args)]
    shapes = [Image.open(io.BytesIO(data)).size[::-1] for data in photos]
    ops = make_ops(args.image_size, args.jpeg_quality)
    for fn in ops.values():  # Trace once, untimed.
        fn(tf.constant(photos[0]))
    refs = [reference(data, args.image_size) for data in photos]

    rows = []
    for margin in MARGINS:
        ratios = [1 if margin is None else codec.jpeg_decode_ratio(
            h, w, args.image_size, margin) for h, w in shapes]
        raw_psnr, jpeg_psnr = [], []
        for data, ref, ratio in zip(photos, refs, ratios, strict=True):
            size = args.image_size
            raw = ops[f"raw/{ratio}"](tf.constant(data)).numpy()
            raw_psnr.append(psnr(np.frombuffer(raw, np.uint8).reshape(size, size, 3), ref))
            stored = ops[f"jpeg/{ratio}"](tf.constant(data))
            decoded = contract.decode_stored_image(stored, contract.JPEG, size).numpy()
            jpeg_psnr.append(psnr(decoded, ref))
        cpu = []
        for _ in range(args.rounds):
            start = time.process_time()
            for data, ratio in zip(photos, ratios, strict=True):
                ops[f"jpeg/{ratio}"](tf.constant(data)).numpy()
            cpu.append((time.process_time() - start) / len(photos))
        rows.append({
            "margin": margin if margin is not None else "full",
            "ratios": {str(r): ratios.count(r) for r in sorted(set(ratios))},
            "psnr_before_encode_db": {"mean": statistics.fmean(raw_psnr),
                                      "min": min(raw_psnr)},
            "psnr_stored_db": {"mean": statistics.fmean(jpeg_psnr), "min": min(jpeg_psnr)},
            "cpu_ms_per_photo": {"median": 1000 * statistics.median(cpu),
                                 "best": 1000 * min(cpu)},
        })

    print(f"{len(photos)} photos from {args.input}, mean "
          f"{statistics.fmean(len(p) for p in photos) / 1e6:.2f} MB, "
          f"{statistics.fmean(h * w for h, w in shapes) / 1e6:.1f} MP; image_size "
          f"{args.image_size}, stored as JPEG q{args.jpeg_quality}")
    print(f"{'margin':>6}  {'scales used':<22} {'PSNR raw mean/min':>18} "
          f"{'PSNR stored mean/min':>21} {'CPU ms/photo':>13}")
    for row in rows:
        used = ", ".join(f"1/{r}: {n}" for r, n in row["ratios"].items())
        print(f"{row['margin']!s:>6}  {used:<22} "
              f"{row['psnr_before_encode_db']['mean']:8.2f} / "
              f"{row['psnr_before_encode_db']['min']:6.2f}   "
              f"{row['psnr_stored_db']['mean']:8.2f} / {row['psnr_stored_db']['min']:6.2f}"
              f"   {row['cpu_ms_per_photo']['median']:9.1f}")
    if args.out:
        write_json(args.out, {
            "date": time.strftime("%Y-%m-%d"), "commit": code_commit(),
            "machine": machine(),
            "tensorflow": tf.__version__, "input": args.input, "photos": len(photos),
            "mean_bytes": statistics.fmean(len(p) for p in photos),
            "image_size": args.image_size, "jpeg_quality": args.jpeg_quality,
            "margins": rows})
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
