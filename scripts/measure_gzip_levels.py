"""What GZIP's deflate buys image shards, by stored format and size: bytes and CPU.

For each --image_format and --sizes, preprocesses --num_images photo-sized JPEGs
(scripts/sample_photos.py) with the job's own ops (etl.images.codec.preprocess),
serializes each as the job's tf.train.Example and writes them all with the job's
shard writer (etl.core.shard_files.ShardWriter) at each of --levels, reporting per record:
the mean record size, the file size at each level relative to level 0 (stored), and
the writer's CPU per record (best of --rounds). The image job's default level for
each format and size (etl.images.shards.default_gzip_level) is recorded beside them.

Usage: python scripts/measure_gzip_levels.py --work_dir /work/bench_data \\
           --out docs/benchmarks/gzip_levels.json
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

import tensorflow as tf
from bench_common import code_commit, machine, write_json
from benchmark_etl import input_files, stored_example
from sample_photos import ensure_photos

from etl.core.shard_files import ShardFormat, ShardWriter
from etl.images import codec
from etl.images.shards import default_gzip_level


def stored_records(payloads: list[bytes], image_format: str, size: int,
                   quality: int) -> list[bytes]:
    """The job's serialized examples of ``payloads`` at ``size`` px in ``image_format``."""
    preprocess = tf.function(lambda data: codec.preprocess(
        data, size, image_format, quality))
    return [stored_example(preprocess(tf.constant(data)).numpy(), size, i % 10,
                           f"class{i % 10}", f"class{i % 10}/{i:06d}.jpg")
            for i, data in enumerate(payloads)]


def write_shard(records: list[bytes], level: int, path: str) -> tuple[int, float]:
    """(file bytes, CPU seconds) of writing ``records`` as one shard at ``level``."""
    start = time.process_time()
    with ShardWriter(path, ShardFormat(gzip_level=level)) as writer:
        writer.write_all(records)
    return writer.num_bytes, time.process_time() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work_dir", default=os.path.join(tempfile.gettempdir(),
                                                           "bench_photos"))
    parser.add_argument("--out", default="docs/benchmarks/gzip_levels.json")
    parser.add_argument("--num_images", type=int, default=300)
    parser.add_argument("--sizes", default="32,64,128,192,224,384")
    parser.add_argument("--formats", default="jpeg,png,raw")
    parser.add_argument("--levels", default="0,1,6")
    parser.add_argument("--jpeg_quality", type=int, default=95)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    levels = [int(level) for level in args.levels.split(",")]
    if 0 not in levels:
        parser.error("--levels must include 0 (the sizes are relative to it).")

    root = ensure_photos(args.work_dir, args.num_images)
    payloads = []
    for path in input_files(root):
        with open(path, "rb") as f:
            payloads.append(f.read())
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for image_format in args.formats.split(","):
            for size in sizes:
                records = stored_records(payloads, image_format, size, args.jpeg_quality)
                n = len(records)
                per_level = {}
                for level in levels:
                    runs = [write_shard(records, level, os.path.join(tmp, f"s{level}.gz"))
                            for _ in range(args.rounds)]
                    per_level[level] = {"file_bytes": runs[0][0],
                                        "cpu_ms_per_record": 1000 * min(c for _, c in runs) / n}
                stored = per_level[0]["file_bytes"]
                row = {
                    "image_format": image_format, "image_size": size, "records": n,
                    "mean_record_bytes": sum(map(len, records)) / n,
                    "default_gzip_level": default_gzip_level(image_format, size),
                    "levels": {str(level): {
                        **value, "bytes_vs_level_0": value["file_bytes"] / stored,
                        "bytes_saved_per_record": (stored - value["file_bytes"]) / n}
                        for level, value in per_level.items()},
                }
                rows.append(row)
                kb = row["mean_record_bytes"] / 1000
                levels_text = "; ".join(f"level {level}: {v['bytes_vs_level_0']:.3f}x, "
                                        f"{v['cpu_ms_per_record']:.3f} ms"
                                        for level, v in row["levels"].items())
                print(f"{image_format:>4} {size:>4} px: record {kb:6.1f} KB, default "
                      f"level {row['default_gzip_level']}; {levels_text}", flush=True)
    commit = code_commit()
    write_json(args.out, {
        "date": time.strftime("%Y-%m-%d"), "code_commit": commit,
        "machine": machine(),
        "input": {"photos": args.num_images, "jpeg_quality": args.jpeg_quality,
                  "source": "scripts/sample_photos.py, seed 0"},
        "rounds": args.rounds, "rows": rows,
        "definitions": {
            "bytes_vs_level_0": "shard file bytes at the level / at level 0 (stored)",
            "bytes_saved_per_record": "(level-0 file bytes - file bytes) / records",
            "cpu_ms_per_record": "CPU of ShardWriter writing every record (framing, "
                                 "deflate, CRC, file), best of rounds, per record",
        },
    })
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
