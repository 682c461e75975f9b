"""What the duplicate report's pixel hash costs per photo: taken right after each
JPEG's decode, as the image job takes it, against after the whole batch's decode,
as it did before.

Photos are decoded as the job decodes them (``etl.images.batches.decode_batch``'s
calls: the plan for ``--image_size`` and libjpeg-turbo's DCT-scaled decode into one
buffer per batch of 32). In each batch, the XXH3-128 of every image's pixels
(``image_hashes.pixels_xxh128``) is timed either right after that image's decode
(while its megabyte of pixels is in cache) or once all 32 are decoded (read back
from memory); the two alternate batch by batch and round by round, and only the
hash calls are timed. Reported per photo: the mean and median over batches, and
each round's mean, for both, with the decoded size.

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

WHEN = ("right_after_decode", "after_batch")
BATCH = 32


def hash_batch(datas: list[bytes], plans: list[loading.JpegDecode], when: str) -> float:
    """Decodes one batch as the job does; returns the seconds spent hashing it."""
    buffer = loading.aligned_buffer(sum(batches.slot_bytes(p.nbytes) for p in plans))
    offset, decoded, spent = 0, [], 0.0
    for data, plan in zip(datas, plans, strict=True):
        pixels = loading.decode_jpeg_into(data, plan, buffer[offset:offset + plan.nbytes],
                                          strict=True)
        offset += batches.slot_bytes(plan.nbytes)
        if when == "right_after_decode":
            start = time.perf_counter()
            image_hashes.pixels_xxh128(pixels)
            spent += time.perf_counter() - start
        decoded.append(pixels)
    if when == "after_batch":
        for pixels in decoded:
            start = time.perf_counter()
            image_hashes.pixels_xxh128(pixels)
            spent += time.perf_counter() - start
    return spent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_photo_folder_flags(parser, max_photos=1600, rounds=3)
    args = parser.parse_args()
    datas, plans = [], []
    for path in photo_files(parser, args):
        with open(path, "rb") as f:
            data = f.read()
        plan = loading.plan_jpeg_decode(data, args.image_size)
        if plan is not None:
            datas.append(data)
            plans.append(plan)
    per_batch: dict[str, list[float]] = {when: [] for when in WHEN}
    rounds: dict[str, list[float]] = {when: [] for when in WHEN}
    for r in range(args.rounds):
        spent = dict.fromkeys(WHEN, 0.0)
        for b, start in enumerate(range(0, len(datas), BATCH)):
            chunk = slice(start, start + BATCH)
            first = (b + r) % 2
            for when in WHEN[first:] + WHEN[:first]:
                seconds = hash_batch(datas[chunk], plans[chunk], when)
                per_batch[when].append(1000 * seconds / len(datas[chunk]))
                spent[when] += seconds
        for when in WHEN:
            rounds[when].append(1000 * spent[when] / len(datas))
    result = {when: {"mean_ms": statistics.fmean(per_batch[when]),
                     "median_ms": statistics.median(per_batch[when]),
                     "rounds_mean_ms": rounds[when]} for when in WHEN}
    result["photos"] = len(datas)
    result["mean_decoded_mb"] = float(np.mean([p.nbytes for p in plans]) / 1e6)
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
