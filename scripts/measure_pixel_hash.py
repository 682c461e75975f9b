"""What the duplicate report's pixel hash costs per photo: taken right after each
JPEG's decode, as the image job takes it, against after the whole batch's decode,
as it did before.

Photos are read and planned as the job does (``etl.images.batches.load_record`` for
``--image_size``), in batches of 32. Each batch is decoded by the job's own
``batches.decode_batch``, either with ``hash_pixels`` (each image hashed right
after its decode, while its megabyte of pixels is in cache) or without it and then
every image's ``image_hashes.pixels_xxh128`` once all 32 are decoded (read back
from memory). The two alternate batch by batch and round by round; what is timed is
the decode and the hashes together, so any effect of the hash on the decode counts
too. Reported per photo: the mean and median over batches and each round's mean,
for both, with the decoded size.

Usage:
    python scripts/measure_pixel_hash.py --input /work/bench_data/photos_20000 \\
        --max_photos 1600 --out docs/benchmarks/pixel_hash.json
"""

from __future__ import annotations

import argparse
import datetime
import statistics
import time

import numpy as np
from bench_common import add_photo_folder_flags, code_commit, machine, photo_files, write_json

from etl.images import batches, image_hashes, loading
from etl.images.sources import ImageRecord

WHEN = ("right_after_decode", "after_batch")
BATCH = 32


def hash_batch(batch: list[batches.Loaded], when: str) -> float:
    """The seconds the job's decode of ``batch`` and its pixel hashes take."""
    start = time.perf_counter()
    decoded = batches.decode_batch(batch, True, hash_pixels=when == "right_after_decode",
                                   apply_exif_orientation=False)
    if when == "after_batch":
        for item in decoded:
            image_hashes.pixels_xxh128(item.pixels.array())
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_photo_folder_flags(parser, max_photos=1600, rounds=3)
    args = parser.parse_args()
    limits = loading.InputLimits()
    loaded = [batches.load_record(ImageRecord(key=path, uri=path, label=""), limits,
                                  args.image_size) for path in photo_files(parser, args)]
    photos = [item for item in loaded if isinstance(item, batches.Loaded) and item.jpeg]
    per_batch: dict[str, list[float]] = {when: [] for when in WHEN}
    rounds: dict[str, list[float]] = {when: [] for when in WHEN}
    for r in range(args.rounds):
        spent = dict.fromkeys(WHEN, 0.0)
        for b, start in enumerate(range(0, len(photos), BATCH)):
            batch = photos[start:start + BATCH]
            first = (b + r) % 2
            for when in WHEN[first:] + WHEN[:first]:
                seconds = hash_batch(batch, when)
                per_batch[when].append(1000 * seconds / len(batch))
                spent[when] += seconds
        for when in WHEN:
            rounds[when].append(1000 * spent[when] / len(photos))
    result = {when: {"mean_ms": statistics.fmean(per_batch[when]),
                     "median_ms": statistics.median(per_batch[when]),
                     "rounds_mean_ms": rounds[when]} for when in WHEN}
    result["photos"] = len(photos)
    result["mean_decoded_mb"] = float(np.mean([item.jpeg.nbytes for item in photos]) / 1e6)
    print({when: round(result[when]["mean_ms"], 4) for when in WHEN},
          f"{result['mean_decoded_mb']:.2f} MB decoded per photo")
    if args.out:
        write_json(args.out, {"what": __doc__.splitlines()[0],
                              "date": datetime.date.today().isoformat(),
                              "machine": machine(), "code": code_commit(),
                              "input": args.input, "image_size": args.image_size,
                              **result})


if __name__ == "__main__":
    main()
