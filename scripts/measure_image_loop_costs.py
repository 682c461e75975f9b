"""One-off: the image shard loop's CPU per web photo, part by part, on one thread.

What each part of ``etl.images.shards.process_shard`` costs beside the ops the TF-ops
ceiling runs (scripts/benchmarks/image_job.py variant (a)): reading and checking, the
job's own decode, the finish graph without and with the thumbnails and the 160 px
luma, the duplicate signatures and the quality measures; and the ceiling's own ops
(TensorFlow's decode and the same finish, ``codec.preprocess``) in a one-call
``tf.data`` map. Best of 3 rounds of CPU time (this process, all threads), ms per
photo. Usage: ``python -m scripts.measure_image_loop_costs [--photos DIR] [--count N]``.
"""

from __future__ import annotations

import argparse
import glob
import os
import time
from collections.abc import Callable

os.environ.setdefault("TF_NUM_INTRAOP_THREADS", "1")

import numpy as np
import tensorflow as tf

from etl.images import batches, codec, loading, quality
from etl.images.duplicates import signatures
from etl.images.preprocessing import ImagePreprocessing
from etl.images.sources import ImageRecord


def best_ms(fn: Callable[[], object], count: int, rounds: int = 3) -> float:
    best = float("inf")
    for _ in range(rounds):
        start = time.process_time()
        fn()
        best = min(best, time.process_time() - start)
    return 1e3 * best / count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--photos", default="/work/bench_data/photos_2000")
    parser.add_argument("--count", type=int, default=640)
    args = parser.parse_args()
    files = sorted(glob.glob(os.path.join(args.photos, "*", "*.jpg")))[:args.count]
    records = [ImageRecord(key=f, uri=f, label="a", split="train", listed=(1, 1))
               for f in files]
    limits = loading.InputLimits()
    loaded = [batches.load_record(r, limits, 224, None) for r in records]
    runs = [loaded[i:i + 32] for i in range(0, len(loaded), 32)]
    decoded = [batches.decode_batch(run, True) for run in runs]
    n = len(files)
    rows = [("read and check (load_record)",
             best_ms(lambda: [batches.load_record(r, limits, 224, None) for r in records], n)),
            ("decode (libjpeg-turbo, scaled)",
             best_ms(lambda: [batches.decode_batch(run, True) for run in runs], n))]
    finished = {}
    for thumbnails, measures in ((False, False), (True, False), (True, True)):
        finish = batches.FinishImages(ImagePreprocessing(224), thumbnails=thumbnails,
                                      quality=measures)
        finish([x.pixels for x in decoded[0]], [x.data for x in decoded[0]])
        out: list = []
        def run(finish: batches.FinishImages = finish, out: list = out) -> None:
            out.extend(finish([x.pixels for x in d], [x.data for x in d]) for d in decoded)

        rows.append((f"finish graph, thumbnails={thumbnails} quality={measures}",
                     best_ms(run, n)))
        finished[(thumbnails, measures)] = out[-len(decoded):]
    done = finished[(True, True)]
    rows.append(("duplicate signatures", best_ms(lambda: [signatures.batch_hashes(
        [x.data for x in d], [x.pixels.array() for x in d], [o.orientation for o in f],
        np.stack([o.thumbnail for o in f])) for d, f in zip(decoded, done, strict=True)], n)))
    rows.append(("quality measures", best_ms(lambda: [quality.measure_quality(
        np.stack([o.quality for o in f]), np.stack([o.luma for o in f])) for f in done], n)))
    data = tf.constant([x.data for x in loaded])

    def ceiling() -> None:
        for _ in tf.data.Dataset.from_tensor_slices(data).map(
                lambda b: codec.preprocess(b, 224, codec.JPEG, 95)).batch(64):
            pass

    ceiling()
    rows.append(("ceiling's ops (TF decode + finish), one tf.data call", best_ms(ceiling, n)))
    print(f"{n} photos from {args.photos}, CPU ms per photo, best of 3")
    for name, value in rows:
        print(f"  {name:<52} {value:6.3f}")


if __name__ == "__main__":
    main()
