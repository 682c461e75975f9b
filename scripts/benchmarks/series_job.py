"""Time-series benchmark: the job against a one-process pandas/numpy script doing the same work.

Input: generated long-format CSV shaped like the UCI electricity-load data (--series
hourly series × --hours points, rows ordered by time then series, values with three
decimals, about one value in 10,000 left empty), written once into --work_dir.
Work, both sides (--window_size=168 --shift=24 --horizon=24 --missing=interpolate by
default): read the CSV, sort each series by time, interpolate missing values,
split each series 80/10/10 by time, cut windows and targets, z-score them with the
train rows' mean and standard deviation, serialize one tf.train.Example per window
and write GZIP TFRecords.

  reference  this file run with --reference: pandas.read_csv, one numpy pass per
             series (np.interp, sliding_window_view), tf.train.Example protos, one
             tf.io.TFRecordWriter (GZIP) per split; one process, one thread of work;
  job        python -m pipelines.timeseries with the same flags, default runner;
  job_baseline  with --baseline_dir DIR (another checkout of this project, the
             "before" of a change): the same job command run in DIR with DIR's
             packages first on the path, so DIR's code is what runs.

Times exclude interpreter start and imports: the reference times itself after its
imports, the job's time is the wall time of ``pipelines.timeseries.run()`` (options,
graph construction, tf.Transform, every stage, the manifest), each written to a JSON
file by the process measured. Rows/s is input rows over that time. Each command runs
as the only child of a fresh wrapper process (harness.peak_rss_command), whose
resource.getrusage(RUSAGE_CHILDREN).ru_maxrss after the child exits is the child's
exact peak RSS. --rounds rounds alternate the runners; a sample taken while other
processes used more than --max_foreign cores is retried (up to --retries times), each
sample waiting first (up to --max_wait s) for other processes to fall below that.
Then, unless --skip_scaled, the job runs once on --scale_factor times the hours (same
series), for the memory growth target (with --skip_scaled that target is recorded as
not run).

Targets (PASS/FAIL): job rows/s >= --min_ratio (0.5) x the reference's (the goal is
1.0: the job may use both cores, the reference uses one); job peak RSS <= --max_peak_gb
(2 GB) at the base size and <= --max_growth (1.3) x that at the scaled size. Every
output (the baseline's too) is checked to hold the reference's number of windows per
split and train statistics. With --baseline_dir the JSON's ``baseline`` also records
DIR, --baseline_label, DIR's commit, the baseline's median and best rows/s, its median
peak RSS and ``current_over_baseline``: job / job_baseline of the median rows/s.

Usage:

    nice -n 19 python -m scripts.benchmarks series_job --work_dir /work/bench_data \\
        --rounds 3

A before/after comparison (DIR: e.g. ``git worktree add /tmp/base <commit>``):

    nice -n 19 python -m scripts.benchmarks series_job --work_dir /work/bench_data \\
        --rounds 3 --skip_scaled --baseline_dir DIR --baseline_label <commit> \\
        --out /tmp/timeseries_vs_base.json
"""

from __future__ import annotations

import argparse
import itertools
import os
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable

import numpy as np

from reader.format import contract
from scripts.benchmarks import harness

BENCHMARK = harness.Benchmark(
    name="series_job",
    measures="the time-series job against a pandas + NumPy script, rows/s and peak memory",
    quick=("--work_dir", "{quick_dir}/series", "--series", "10", "--hours", "2000", "--rounds",
           "1", "--skip_scaled", "--out", "{quick_dir}/series_job.json"),
)


HOUR = np.timedelta64(1, "h")
START = np.datetime64("2012-01-01T00:00:00")


# --- input -----------------------------------------------------------------------------

def generate(path: str, series: int, hours: int, seed: int = 0,
             missing_fraction: float = 1e-4) -> int:
    """Writes the long-format CSV (header series_id,timestamp,value); returns its rows.

    Each series is a daily cycle around its own level plus noise; rows go hour by
    hour, all series of an hour together, as a wide table melted by time would.
    """
    rng = np.random.default_rng(seed)
    level = rng.uniform(10, 1000, series)
    swing = rng.uniform(0.1, 0.5, series)
    phase = rng.uniform(0, 2 * np.pi, series)
    ids = [f"MT_{i + 1:03d}" for i in range(series)]
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write("series_id,timestamp,value\n")
        for first in range(0, hours, 512):
            block = np.arange(first, min(hours, first + 512))
            values = level * (1 + swing * np.sin(2 * np.pi * block[:, None] / 24 + phase))
            values += rng.normal(0, 5, values.shape)
            missing = rng.random(values.shape) < missing_fraction
            stamps = np.datetime_as_string(START + block * HOUR, unit="s")
            lines = []
            for h, stamp in enumerate(stamps.tolist()):
                stamp = stamp.replace("T", " ")
                texts = np.char.mod("%.3f", values[h]).tolist()
                lines += [f"{sid},{stamp},{'' if gone else text}\n"
                          for sid, text, gone in zip(ids, texts, missing[h].tolist(),
                                                     strict=True)]
            f.write("".join(lines))
    os.replace(tmp, path)
    return series * hours


def ensure_input(work_dir: str, series: int, hours: int) -> str:
    path = os.path.join(work_dir, f"series_{series}x{hours}.csv")
    if not os.path.exists(path):
        print(f"generating {path} ...", flush=True)
        generate(path, series, hours)
    return path


# --- the reference ---------------------------------------------------------------------

def reference(input_path: str, output_dir: str, window: int, shift: int, horizon: int
              ) -> dict:
    """The same work as the job, as a plain one-process script; returns its timings."""
    import pandas as pd
    import tensorflow as tf
    from numpy.lib.stride_tricks import sliding_window_view

    started = time.perf_counter()
    frame = pd.read_csv(input_path, dtype={"series_id": str, "timestamp": str,
                                           "value": np.float64})
    seconds = pd.to_datetime(frame["timestamp"], format="%Y-%m-%d %H:%M:%S").to_numpy(
        "datetime64[s]").astype(np.int64).astype(np.float64)
    frame["t"] = seconds
    frame = frame.sort_values(["series_id", "t"], kind="stable", ignore_index=True)
    ids = frame["series_id"].to_numpy()
    times = frame["t"].to_numpy()
    values = frame["value"].to_numpy()
    texts = frame["timestamp"].to_numpy()
    bounds = [0, *(np.flatnonzero(ids[1:] != ids[:-1]) + 1).tolist(), len(ids)]
    span = window + horizon
    pieces: dict[str, list[tuple[str, np.ndarray, np.ndarray]]] = {
        "train": [], "validation": [], "test": []}
    for a, b in itertools.pairwise(bounds):
        t, v, x = times[a:b], values[a:b], texts[a:b]
        first = np.flatnonzero(np.diff(t) != 0) + 1
        if len(first) + 1 < len(t):  # duplicate timestamps: their mean
            starts = np.concatenate([[0], first])
            v = np.add.reduceat(np.nan_to_num(v), starts) / np.maximum(
                1, np.add.reduceat(~np.isnan(v), starts))
            t, x = t[starts], x[starts]
        valid = ~np.isnan(v)
        lo, hi = np.flatnonzero(valid)[[0, -1]]
        v = np.interp(t, t[valid], v[valid])[lo:hi + 1]
        t, x = t[lo:hi + 1], x[lo:hi + 1]
        cuts = np.flatnonzero(np.diff(t) > 1.5 * np.median(np.diff(t))) + 1
        n = len(t)
        edges = {"train": (0, round(n * 0.8)), "validation": (round(n * 0.8), round(n * 0.9)),
                 "test": (round(n * 0.9), n)}
        segments = [0, *cuts.tolist(), n]
        for split, (lo, hi) in edges.items():
            for s0, s1 in itertools.pairwise(segments):
                p0, p1 = max(lo, s0), min(hi, s1)
                if p1 > p0:
                    pieces[split].append((ids[a], x[p0:p1], v[p0:p1].astype(np.float32)))
    train = np.concatenate([v for _, _, v in pieces["train"]]).astype(np.float64)
    mean, std = np.float32(train.mean()), np.float32(train.std())
    counts = {}
    os.makedirs(output_dir, exist_ok=True)
    options = tf.io.TFRecordOptions(compression_type="GZIP")
    for split, split_pieces in pieces.items():
        count = 0
        path = os.path.join(output_dir, f"{split}.tfrecord.gz")
        with tf.io.TFRecordWriter(path, options) as writer:
            for series_id, x, v in split_pieces:
                if len(v) < span:
                    continue
                cut = sliding_window_view((v - mean) / std, span)[::shift].tolist()
                sid = series_id.encode()
                for i, row in enumerate(cut):
                    start = x[i * shift].encode()
                    example = tf.train.Example(features=tf.train.Features(feature={
                        contract.WINDOW_KEY: tf.train.Feature(
                            float_list=tf.train.FloatList(value=row[:window])),
                        contract.TARGET_KEY: tf.train.Feature(
                            float_list=tf.train.FloatList(value=row[window:])),
                        contract.SERIES_ID_KEY: tf.train.Feature(
                            bytes_list=tf.train.BytesList(value=[sid])),
                        contract.WINDOW_START_KEY: tf.train.Feature(
                            bytes_list=tf.train.BytesList(value=[start])),
                        contract.SOURCE_KEY: tf.train.Feature(
                            bytes_list=tf.train.BytesList(value=[sid + b"@" + start])),
                    }))
                    writer.write(example.SerializeToString())
                    count += 1
        counts[split] = count
    elapsed = time.perf_counter() - started
    return {"seconds": elapsed, "rows": len(frame), "windows": counts,
            "mean": float(mean), "std": float(std)}


# --- measuring -------------------------------------------------------------------------

def _measured(command: list[str], log: str, result_path: str, what: str,
              code_dir: str = harness.REPO_ROOT) -> dict:
    """harness.measure(command) and the JSON the command wrote to ``result_path``;
    the command runs in ``code_dir`` with that checkout's packages."""
    if os.path.exists(result_path):
        os.remove(result_path)
    result = harness.measure(command, log, code_dir)
    if result["rc"] != 0 or not os.path.exists(result_path):
        with open(log, errors="replace") as f:
            raise RuntimeError(f"{what} failed (rc {result['rc']}):\n{f.read()[-3000:]}")
    return {**result, **harness.read_json(result_path)}


def run_reference(input_path: str, out: str, log: str, flags: dict,
                  script: str = __file__) -> dict:
    """``script --reference ...`` (its ``reference()``) measured in a fresh process."""
    result_path = out + ".result.json"
    command = [sys.executable, os.path.abspath(script), "--reference", input_path, out,
               str(flags["window_size"]), str(flags["shift"]), str(flags["horizon"]),
               result_path]
    return _measured(command, log, result_path, "reference")


def add_reference_flag(parser: argparse.ArgumentParser) -> None:
    """The hidden flag with which a script runs its own reference (run_reference)."""
    parser.add_argument("--reference", nargs=6,
                        metavar=("INPUT", "OUT", "W", "SHIFT", "H", "RESULT"),
                        help=argparse.SUPPRESS)


def ran_reference(args: argparse.Namespace, reference_fn) -> bool:
    """Runs ``reference_fn`` and writes its result if ``--reference`` was given."""
    if not args.reference:
        return False
    input_path, out, window, shift, horizon, result_path = args.reference
    harness.write_json(result_path, reference_fn(input_path, out, int(window), int(shift),
                                         int(horizon)))
    return True


def run_job(input_path: str, out: str, log: str, flags: dict,
            code_dir: str = harness.REPO_ROOT) -> dict:
    """``python -m pipelines.timeseries`` of the checkout in ``code_dir``, measured."""
    timings_path = out + ".timings.json"
    argv = [f"--input={input_path}", f"--output_dir={out}", "--overwrite",
            *(f"--{k}={v}" for k, v in flags.items())]
    result = _measured(harness.timed_job_command("pipelines.timeseries", argv, timings_path), log,
                       timings_path, "job", code_dir)
    del result["import_s"]
    seconds = result.pop("job_s")
    manifest = harness.read_manifest(out)
    summary = harness.output_summary(manifest)
    return {**result, "seconds": seconds, "rows": manifest["inputs"],
            "windows": {s: manifest["splits"][s]["num_records"] for s in manifest["splits"]},
            "mean": manifest["normalisation"]["mean"][0],
            "std": manifest["normalisation"]["std"][0],
            "shards": summary["shards"], "output_mib": summary["output_mib"]}


def sample(fn: Callable[[], dict], args: argparse.Namespace) -> dict:
    """``fn()`` on a quiet machine (see harness.quiet_sample)."""
    measured, attempts = harness.quiet_sample(fn, args.max_foreign, args.retries,
                                              max_wait_s=args.max_wait)
    return {**measured.extra, "foreign_cores": attempts[-1], "attempts_foreign": attempts}


# --- the run ---------------------------------------------------------------------------

def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_reference_flag(parser)
    parser.add_argument("--series", type=int, default=370)
    parser.add_argument("--hours", type=int, default=8760)
    parser.add_argument("--scale_factor", type=int, default=3,
                        help="The memory growth run uses this many times --hours.")
    parser.add_argument("--skip_scaled", action="store_true",
                        help="Skip the memory growth run (its target: not run), e.g. "
                             "for a before/after comparison.")
    parser.add_argument("--window_size", type=int, default=168)
    parser.add_argument("--shift", type=int, default=24)
    parser.add_argument("--horizon", type=int, default=24)
    harness.add_sampling_flags(parser, rounds=3)
    parser.add_argument("--max_wait", type=float, default=300,
                        help="Seconds to wait for a quiet machine before each sample.")
    parser.add_argument("--min_ratio", type=float, default=0.5)
    parser.add_argument("--max_peak_gb", type=float, default=2.0)
    parser.add_argument("--max_growth", type=float, default=1.3)
    parser.add_argument("--baseline_dir", default=None,
                        help="Another checkout of this project (the 'before' of a "
                             "change): its job runs too, as job_baseline, in the same "
                             "rounds.")
    parser.add_argument("--baseline_label", default="",
                        help="What --baseline_dir is, recorded in the JSON.")
    parser.add_argument("--work_dir", default="/tmp/bench_series")
    harness.add_result_flags(parser, "series_job", "<series>x<hours>, and _and_x<scale_factor> "
                             "without --skip_scaled")
    args = parser.parse_args()
    if args.baseline_dir and not os.path.isfile(
            os.path.join(args.baseline_dir, "pipelines", "timeseries.py")):
        parser.error(f"--baseline_dir {args.baseline_dir!r} is no checkout of this "
                     "project (no pipelines/timeseries.py)")
    return args


def baseline_commit(code_dir: str) -> str:
    """The HEAD commit of the checkout in ``code_dir`` (empty if git cannot tell)."""
    return subprocess.run(["git", "-C", code_dir, "rev-parse", "HEAD"],
                          capture_output=True, text=True).stdout.strip()


def make_runners(args: argparse.Namespace, input_path: str, work_dir: str, flags: dict
                 ) -> dict[str, Callable[[int], dict]]:
    """reference, job and, with --baseline_dir, job_baseline: each a function of the
    round that runs and measures one sample."""
    out_root = os.path.join(work_dir, "out")
    logs = os.path.join(work_dir, "logs")
    os.makedirs(logs, exist_ok=True)

    def job(name: str, code_dir: str, **more: str) -> Callable[[int], dict]:
        return lambda r: run_job(input_path, os.path.join(out_root, name),
                                 os.path.join(logs, f"{name}_{r}.log"), {**flags, **more},
                                 code_dir)

    runners = {
        "reference": lambda r: run_reference(input_path, os.path.join(out_root, "reference"),
                                             os.path.join(logs, f"reference_{r}.log"), flags),
        "job": job("job", harness.REPO_ROOT),
        # The same job without its statistics and report (docs/KNOW_YOUR_DATA.md).
        "job_no_statistics": job("job_no_statistics", harness.REPO_ROOT, statistics="off"),
    }
    if args.baseline_dir:
        runners["job_baseline"] = job("job_baseline", os.path.abspath(args.baseline_dir))
    return runners


def print_sample(label: str, record: dict) -> None:
    print(f"{label} {record['seconds']:7.2f} s  "
          f"{record['rows'] / record['seconds']:>10,.0f} rows/s  peak RSS "
          f"{record['peak_rss_mib']:7.1f} MiB  (other processes: "
          f"{record['foreign_cores']:.2f} cores)", flush=True)


def run_rounds(runners: dict[str, Callable[[int], dict]], args: argparse.Namespace
               ) -> dict[str, list[dict]]:
    """--rounds interleaved rounds of every runner; the samples by runner."""
    samples: dict[str, list[dict]] = {name: [] for name in runners}
    width = max(9, *(len(name) for name in runners))
    for r, name in harness.interleaved(list(runners), args.rounds):
        record = sample(lambda name=name, r=r: runners[name](r), args)
        samples[name].append(record)
        print_sample(f"round {r + 1}/{args.rounds} {name:<{width}}", record)
    return samples


def same_output(samples: dict[str, list[dict]]) -> dict:
    """Whether every sample has the reference's windows per split, and every job's
    (current and baseline) its train statistics."""
    ref = samples["reference"][0]
    same_windows = all(s["windows"] == ref["windows"]
                       for records in samples.values() for s in records)
    same_stats = all(abs(s["mean"] - ref["mean"]) <= 1e-4 * abs(ref["mean"])
                     and abs(s["std"] - ref["std"]) <= 1e-4 * ref["std"]
                     for name, records in samples.items() if name != "reference"
                     for s in records)
    return {"windows_per_split": same_windows, "train_statistics": same_stats,
            "pass": same_windows and same_stats}


def median_of(records: list[dict], key: str) -> float:
    return statistics.median(s[key] for s in records)


def statistics_by_round(samples: dict[str, list[dict]]) -> list[float]:
    """job ÷ job_no_statistics rows/s round by round: the two runs of a round follow
    each other, so a machine whose speed drifts over the minutes of the benchmark
    moves both alike, which the ratio of the medians (of runs in different rounds)
    does not undo."""
    # The same rows both ways: the ratio of rates is the inverse ratio of times.
    return [round(without["seconds"] / with_["seconds"], 3) for with_, without in zip(
        samples["job"], samples["job_no_statistics"], strict=True)]


def evaluate(args: argparse.Namespace, samples: dict[str, list[dict]],
             big: dict | None) -> dict:
    """The targets; the growth target is marked not run without the scaled run."""
    rate = statistics.median(s["rows"] / s["seconds"] for s in samples["job"])
    ratio = rate / statistics.median(s["rows"] / s["seconds"]
                                     for s in samples["reference"])
    peak = median_of(samples["job"], "peak_rss_mib")
    growth: dict = {"run": False, "max": args.max_growth, "pass": None}
    if big is not None:
        value = big["peak_rss_mib"] / peak
        growth = {"value": round(value, 3), "max": args.max_growth,
                  "pass": value <= args.max_growth}
    return {
        "ratio": {"value": round(ratio, 3), "min": args.min_ratio,
                  "pass": ratio >= args.min_ratio, "goal_1x": ratio >= 1.0},
        "peak": {"value_mib": peak, "max_bytes": args.max_peak_gb * 1e9,
                 "pass": peak * harness.MIB <= args.max_peak_gb * 1e9},
        "growth": growth,
        "same_output": same_output(samples),
    }


def baseline_summary(args: argparse.Namespace, commit: str, samples: dict[str, list[dict]],
                     rate: dict[str, float], best: dict[str, float]) -> dict:
    """What the JSON records of the baseline: which code, its figures, current / it."""
    return {"dir": os.path.abspath(args.baseline_dir), "label": args.baseline_label,
            "commit": commit,
            "rows_per_s": {"median": rate["job_baseline"], "best": best["job_baseline"]},
            "peak_rss_mib_median": median_of(samples["job_baseline"], "peak_rss_mib"),
            "current_over_baseline": round(rate["job"] / rate["job_baseline"], 3)}


def print_summary(args: argparse.Namespace, samples: dict[str, list[dict]],
                  rate: dict[str, float], best: dict[str, float], targets: dict,
                  big: dict | None, baseline: dict | None) -> None:
    width = max(9, *(len(name) for name in samples))
    for name, records in samples.items():
        print(f"{name:<{width}} median {rate[name]:>10,.0f} rows/s (best {best[name]:,.0f}), "
              f"{median_of(records, 'seconds'):.2f} s, peak RSS "
              f"{median_of(records, 'peak_rss_mib'):.0f} MiB")
    by_round = statistics_by_round(samples)
    print(f"with statistics / without: {rate['job'] / rate['job_no_statistics']:.3f} x "
          f"(median rows/s); round by round {', '.join(f'{r:.3f}' for r in by_round)} "
          f"(median {statistics.median(by_round):.3f})")
    if baseline is not None:
        print(f"current / baseline ({baseline['label'] or baseline['dir']}, "
              f"{baseline['commit'][:10] or 'commit unknown'}): "
              f"{baseline['current_over_baseline']:.3f} x (median rows/s)")
    ratio, peak = targets["ratio"]["value"], targets["peak"]["value_mib"]
    print(f"target: job >= {args.min_ratio} x reference: {ratio:.2f} x -> "
          f"{'PASS' if targets['ratio']['pass'] else 'FAIL'} (goal 1 x: "
          f"{'met' if ratio >= 1 else 'not met'})")
    print(f"target: job peak RSS <= {args.max_peak_gb} GB: {peak:.0f} MiB -> "
          f"{'PASS' if targets['peak']['pass'] else 'FAIL'}")
    growth = targets["growth"]
    verdict = ("not run (--skip_scaled)" if big is None else
               f"{big['peak_rss_mib']:.0f} MiB = {growth['value']:.2f} x -> "
               f"{'PASS' if growth['pass'] else 'FAIL'}")
    print(f"target: peak at {args.scale_factor}x rows <= {args.max_growth} x: {verdict}")
    print(f"check: same windows per split and train statistics -> "
          f"{'PASS' if targets['same_output']['pass'] else 'FAIL'}")


def main() -> None:
    args = parse_args()
    if ran_reference(args, reference):
        return

    work_dir = os.path.abspath(args.work_dir)  # The baseline's job runs in its own cwd.
    os.makedirs(work_dir, exist_ok=True)
    flags = {"window_size": args.window_size, "shift": args.shift,
             "horizon": args.horizon, "missing": "interpolate"}
    commit = baseline_commit(args.baseline_dir) if args.baseline_dir else ""
    base = ensure_input(work_dir, args.series, args.hours)
    scaled = (None if args.skip_scaled else
              ensure_input(work_dir, args.series, args.hours * args.scale_factor))
    samples = run_rounds(make_runners(args, base, work_dir, flags), args)
    big = None
    if scaled is not None:
        big = sample(lambda: run_job(scaled, os.path.join(work_dir, "out", "job_scaled"),
                                     os.path.join(work_dir, "logs", "job_scaled.log"),
                                     flags), args)
        print_sample("scaled    job", big)
    shutil.rmtree(os.path.join(work_dir, "out"), ignore_errors=True)

    rate = {name: statistics.median(s["rows"] / s["seconds"] for s in records)
            for name, records in samples.items()}
    best = {name: max(s["rows"] / s["seconds"] for s in records)
            for name, records in samples.items()}
    targets = evaluate(args, samples, big)
    baseline = (baseline_summary(args, commit, samples, rate, best)
                if args.baseline_dir else None)
    print_summary(args, samples, rate, best, targets, big, baseline)
    result = {
        "date": time.strftime("%Y-%m-%d"),
        "machine": harness.machine(),
        "code": harness.code_version(),
        "input": {"series": args.series, "hours": args.hours,
                  "rows": samples["job"][0]["rows"],
                  "bytes": os.path.getsize(base),
                  "scaled_rows": big["rows"] if big else None,
                  "scaled_bytes": os.path.getsize(scaled) if scaled else None},
        "flags": flags,
        "samples": samples,
        "scaled_job": big,
        "rows_per_s": {"median": rate, "best": best},
        "targets": targets,
        # With the statistics and report (the default) over without (--statistics=off).
        "statistics_cost": {
            "rows_per_s_on_over_off": round(rate["job"] / rate["job_no_statistics"], 3),
            "by_round": statistics_by_round(samples),
            "by_round_median": statistics.median(statistics_by_round(samples)),
            "peak_rss_on_over_off": round(median_of(samples["job"], "peak_rss_mib")
                                          / median_of(samples["job_no_statistics"],
                                                      "peak_rss_mib"), 3)},
    }
    if baseline is not None:
        result["baseline"] = baseline
    harness.write_result(args.out, args.setting or (f"{args.series}x{args.hours}" + (
        "" if args.skip_scaled else f"_and_x{args.scale_factor}")), result, CHART)
    print(f"wrote {args.out}")


CHART = harness.Chart("rows per second", lambda result: {
    name: {"median": median, "best": result["rows_per_s"]["best"][name]}
    for name, median in result["rows_per_s"]["median"].items()},
    unit="rows / s", value_format=",.0f")


if __name__ == "__main__":
    main()
