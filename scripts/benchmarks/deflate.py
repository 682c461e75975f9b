"""What each deflate costs and saves on the shards the jobs write.

For each dataset given, every GZIP shard of its train split is inflated to its
TFRecord frames, and those bytes are deflated, in memory and on one thread, by
zlib at levels 1 and 6 (what the jobs used before ISA-L, and Python's gzip still
writes at 7-9) and by ISA-L at its levels 1, 2 and 3 (``isal``; the jobs' levels 1-3
and 4-6, ``etl.core.shards.files.deflate_level``): the compressed size over the
records' and MB of records per second of CPU, the best of --rounds.

Usage (datasets written by the jobs beforehand, e.g. the series_job benchmark's and
scripts/demo.sh's; --series_dataset DIR writes a small time-series one into DIR first):

    python -m scripts.benchmarks deflate --dataset /tmp/ts_out \\
        --dataset demo_output/co2 --rounds 3
"""

from __future__ import annotations

import argparse
import glob
import gzip
import os
import time
import zlib

from scripts.benchmarks import harness, series_job

BENCHMARK = harness.Benchmark(
    name="deflate",
    measures="zlib's and ISA-L's deflate on the jobs' shards: size and MB/s of CPU",
    quick=("--series_dataset", "{quick_dir}/deflate", "--rounds", "1", "--out",
           "{quick_dir}/deflate.json"),
)


def codecs() -> dict[str, object]:
    from isal import isal_zlib

    return {"zlib 1": lambda data: zlib.compress(data, 1),
            "zlib 6": lambda data: zlib.compress(data, 6),
            **{f"isal {level}": (lambda data, level=level: isal_zlib.compress(data, level))
               for level in (1, 2, 3)}}


def measure(records: bytes, rounds: int) -> dict[str, dict[str, float]]:
    """Each codec's ratio (compressed / records) and best MB/s of CPU time."""
    result = {}
    for name, compress in codecs().items():
        best = float("inf")
        for _ in range(rounds):
            started = time.process_time()
            size = len(compress(records))
            best = min(best, time.process_time() - started)
        result[name] = {"ratio": round(size / len(records), 4),
                        "mb_per_s": round(len(records) / best / 1e6, 1)}
    return result


def small_series_dataset(work_dir: str) -> str:
    """The time-series job's dataset of 10 series x 2,000 hours (series_job's
    generator, window 168, shift 24), written under ``work_dir``; its path."""
    out = os.path.join(work_dir, "series_10x2000")
    series_job.run_job(series_job.ensure_input(work_dir, 10, 2000), out,
                       os.path.join(work_dir, "job.log"),
                       {"window_size": 168, "shift": 24, "horizon": 24,
                        "missing": "interpolate"})
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", action="append", default=[],
                        help="A dataset folder the jobs wrote (repeatable).")
    parser.add_argument("--series_dataset", default=None, metavar="DIR",
                        help="Also write and measure a small time-series dataset in DIR.")
    parser.add_argument("--rounds", type=int, default=3)
    harness.add_result_flags(parser, "deflate", "the datasets' names joined by _")
    args = parser.parse_args()
    if args.series_dataset:
        os.makedirs(args.series_dataset, exist_ok=True)
        args.dataset.append(small_series_dataset(os.path.abspath(args.series_dataset)))
    if not args.dataset:
        parser.error("give --dataset (or --series_dataset)")
    results = {}
    for folder in args.dataset:
        shards = sorted(glob.glob(os.path.join(folder, "train", "*.tfrecord.gz")))
        if not shards:
            parser.error(f"{folder}: no train/*.tfrecord.gz shard")
        records = b"".join(gzip.open(path).read() for path in shards)
        name = os.path.basename(os.path.normpath(folder))
        results[name] = {"records_mb": round(len(records) / 1e6, 2),
                         "codecs": measure(records, args.rounds)}
        print(f"{name}: {len(records) / 1e6:.1f} MB of records")
        for codec, figures in results[name]["codecs"].items():
            print(f"  {codec:7s} ratio {figures['ratio']:.3f}  {figures['mb_per_s']:7.1f} MB/s")
    setting = args.setting or "_".join(results)
    harness.write_result(args.out, setting, {
        "date": time.strftime("%Y-%m-%d"), "machine": harness.machine(),
        "code": harness.code_version(), "datasets": results}, CHART)
    print(f"wrote {args.out}")


CHART = harness.Chart("MB of records per second of CPU, by codec", lambda result: {
    f"{name}: {codec}": figures["mb_per_s"]
    for name, data in result["datasets"].items()
    for codec, figures in data["codecs"].items()}, unit="MB/s", value_format=",.0f")


if __name__ == "__main__":
    main()
