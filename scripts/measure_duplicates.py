"""How far apart the job's perceptual hashes are for copies and for different photos:
the measurement behind --near_duplicate_distance's default.

On --num_images web-size sample photos (scripts/sample_photos.py), each photo's
hash is computed as the job computes it (``FinishImages``: decode, resize to
--image_size, centre crop, thumbnail; ``image_hashes.perceptual_hash``), and so are
the hashes of its variants: JPEG re-encodes of its decoded pixels (quality 70, 80,
90, 95), resizes to 50-90 % (bicubic, saved at quality 90) and a horizontal flip.
Reported: the distance of each variant to its photo (recall at each threshold), of
each flip, and of every pair of different photos (the sample photos are windows of a
few source photos, so some pairs overlap: those pairs are listed).

Usage: python scripts/measure_duplicates.py --work_dir /work/bench_data \\
           --num_images 600 --out docs/benchmarks/duplicate_distances.json
"""

from __future__ import annotations

import argparse
import datetime
import glob
import io
import itertools
import os

import numpy as np
from bench_common import code_version, machine, write_json
from PIL import Image
from sample_photos import describe, ensure_tree

from etl.images import image_hashes
from etl.images.batches import FinishImages
from etl.images.preprocessing import ImagePreprocessing

REENCODES = (70, 80, 90, 95)
RESIZES = (50, 60, 70, 80, 90)
THRESHOLDS = range(0, 13)


def _jpeg(image: Image.Image, quality: int) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, "JPEG", quality=quality)
    return buffer.getvalue()


def variants(data: bytes) -> dict[str, bytes]:
    """The photo's re-encodes, resizes and flip, as files."""
    image = Image.open(io.BytesIO(data)).convert("RGB")
    found = {f"q{q}": _jpeg(image, q) for q in REENCODES}
    for percent in RESIZES:
        size = (max(1, round(image.width * percent / 100)),
                max(1, round(image.height * percent / 100)))
        found[f"r{percent}"] = _jpeg(image.resize(size, Image.Resampling.BICUBIC), 90)
    found["flip"] = _jpeg(image.transpose(Image.Transpose.FLIP_LEFT_RIGHT), 90)
    return found


def hashes(finish: FinishImages, files: list[bytes]) -> list[int]:
    """The job's perceptual hash of each file, 32 at a time."""
    found = []
    for start in range(0, len(files), 32):
        batch = files[start:start + 32]
        done = finish(finish.decode(batch), batch)
        found += [image_hashes.perceptual_hash(d.thumbnail)[0] for d in done]
    return found


def histogram(distances: list[int]) -> list[int]:
    return np.bincount(distances, minlength=65).tolist()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work_dir", required=True)
    parser.add_argument("--num_images", type=int, default=600)
    parser.add_argument("--image_size", type=int, default=224)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    tree = ensure_tree(args.work_dir, args.num_images, "web")
    paths = sorted(glob.glob(os.path.join(tree, "*", "*.jpg")))[:args.num_images]
    finish = FinishImages(ImagePreprocessing(image_size=args.image_size))
    originals = []
    for path in paths:
        with open(path, "rb") as f:
            originals.append(f.read())
    base = hashes(finish, originals)
    by_variant: dict[str, list[int]] = {}
    for data, phash in zip(originals, base, strict=True):
        made = variants(data)
        for name, variant_hash in zip(made, hashes(finish, list(made.values())), strict=True):
            by_variant.setdefault(name, []).append(image_hashes.hamming(phash, variant_hash))
    copies = [d for name, found in by_variant.items() if name != "flip" for d in found]
    pairs = [(image_hashes.hamming(a, b), i, j)
             for (i, a), (j, b) in itertools.combinations(enumerate(base), 2)]
    different = [d for d, _, _ in pairs]
    result = {
        "what": "perceptual-hash distances: copies vs different photos",
        "date": datetime.date.today().isoformat(), "machine": machine(),
        "code": code_version(), "input": describe(tree), "num_images": len(paths),
        "image_size": args.image_size,
        "copies_histogram": histogram(copies),
        "by_variant_histogram": {name: histogram(found) for name, found in by_variant.items()},
        "flips_histogram": histogram(by_variant["flip"]),
        "different_photos_histogram": histogram(different),
        "at_threshold": {t: {
            "copy_recall": round(sum(d <= t for d in copies) / len(copies), 4),
            "flips_paired": sum(d <= t for d in by_variant["flip"]),
            "different_pairs_paired": sum(d <= t for d in different)} for t in THRESHOLDS},
        "closest_different_pairs": [
            {"distance": d, "a": os.path.relpath(paths[i], tree),
             "b": os.path.relpath(paths[j], tree)} for d, i, j in sorted(pairs)[:10]],
    }
    write_json(args.out, result)
    for t, row in result["at_threshold"].items():
        print(t, row)


if __name__ == "__main__":
    main()
