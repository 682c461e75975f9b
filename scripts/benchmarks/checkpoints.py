"""Size of a make_dataset iterator checkpoint, symbolic and in full, and its restore time.

On --num_images photo-derived 224 px JPEG records (the reader benchmark's dataset,
scripts/benchmarks/reader_throughput.py), for each configuration below: build the dataset, take
--batches batches, wait --settle_s seconds so that every buffer has filled (the worst
case for a full checkpoint), save ``tf.train.Checkpoint(iterator=...)``, and record
its bytes; then restore it into a fresh iterator and time the first batch after it.

  default         make_dataset(d, "train", seed=3): symbolic where tf.data allows
  full            the same with ReadConfig(symbolic_checkpoint=False): every buffer
  endless         num_epochs=None, as FitCheckpoint needs (tf.data 2.21 cannot
                  restore a repeated stream symbolically, so this one is in full)
  small_buffer    default with ReadConfig(shuffle_buffer=--small_buffer)
  unshuffled      shuffle=False: positions only, nothing buffered is saved

Usage: python -m scripts.benchmarks checkpoints --work_dir /work/bench_data \\
           [--num_images 1600]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import tensorflow as tf

import reader
from reader.tfdata import pipeline, resume
from scripts.benchmarks import harness

BENCHMARK = harness.Benchmark(
    name="checkpoints",
    measures="the size and time of a make_dataset iterator's checkpoint",
    quick=("--work_dir", "{quick_dir}/reader", "--num_images", "200", "--batches", "3",
           "--out", "{quick_dir}/checkpoints.json"),
)


def measure(data_dir: str, batch_size: int, batches: int, settle_s: float,
            scratch: str, **kwargs: object) -> dict:
    def build() -> tf.data.Dataset:
        return reader.make_dataset(data_dir, "train", batch_size, seed=3, **kwargs)

    iterator = iter(build())
    for _ in range(batches):
        next(iterator)
    time.sleep(settle_s)
    start = time.perf_counter()
    path = tf.train.Checkpoint(iterator=iterator).write(scratch)
    save_s = time.perf_counter() - start
    size = resume.checkpoint_size(path)
    restored = iter(build())
    start = time.perf_counter()
    tf.train.Checkpoint(iterator=restored).read(path).assert_consumed()
    next(restored)
    return {"bytes": size, "save_s": save_s,
            "restore_and_first_batch_s": time.perf_counter() - start}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    harness.add_image_dataset_flags(parser, work_dir="/tmp/reader_throughput",
                                    num_images=1600, batch_size=32)
    parser.add_argument("--batches", type=int, default=10)
    parser.add_argument("--settle_s", type=float, default=2.0)
    parser.add_argument("--small_buffer", type=int, default=256)
    harness.add_result_flags(parser, "checkpoints", "images_<num_images>")
    args = parser.parse_args()

    data_dir = harness.image_dataset(args.work_dir, args.num_images, args.num_shards,
                                     "reader_dataset")
    info = reader.open_dataset(data_dir)
    configs = {
        "default": {},
        "full": {"read_config": reader.ReadConfig(symbolic_checkpoint=False)},
        "endless": {"num_epochs": None},
        "small_buffer": {"read_config": reader.ReadConfig(
            shuffle_buffer=args.small_buffer)},
        "unshuffled": {"shuffle": False},
    }
    results = {}
    with tempfile.TemporaryDirectory() as scratch:
        for name, kwargs in configs.items():
            results[name] = measure(data_dir, args.batch_size, args.batches,
                                    args.settle_s, os.path.join(scratch, name), **kwargs)
            print(f"{name:<14} {results[name]['bytes'] / 2**20:8.2f} MiB  save "
                  f"{results[name]['save_s']:.2f} s  restore + first batch "
                  f"{results[name]['restore_and_first_batch_s']:.2f} s", flush=True)
    records = info.num_records("train")
    size = int(info.preprocessing["image_size"])
    result = {
        "date": time.strftime("%Y-%m-%d"),
        "machine": harness.machine(),
        "data": {"records": records,
                 "mean_record_bytes": info.manifest["splits"]["train"]["num_bytes"]
                 // records, "image_size": size,
                 "default_shuffle_buffer": pipeline.default_shuffle_buffer(
                     info, "train", decoded=False)},
        "batch_size": args.batch_size,
        "batches_before_save": args.batches,
        "settle_s": args.settle_s,
        "decoded_batch_bytes": args.batch_size * size * size * 3 * 4,
        "small_buffer": args.small_buffer,
        "checkpoints": results,
    }
    harness.write_result(args.out, args.setting or f"images_{args.num_images}", result,
                         CHART)
    print(f"wrote {args.out}")


CHART = harness.Chart("checkpoint size by kind", lambda result: {
    kind: entry["bytes"] / harness.MIB for kind, entry in result["checkpoints"].items()},
    unit="MiB saved")


if __name__ == "__main__":
    main()
