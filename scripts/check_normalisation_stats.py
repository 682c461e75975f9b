"""Checks the time-series manifest's normalisation against an independent float64 computation.

Input: scripts/benchmark_timeseries.py's generated long-format CSV (--series hourly
series x --hours rows: a daily cycle around each series' own level, drawn from
10-1000, plus noise, three decimals, about one value in 10,000 left empty), written
once into --work_dir. The job runs on it with the benchmark's windows
(--window_size=168 --shift=24 --horizon=24), explicit cut-offs (--split_times at 80 %
and 90 % of the hours) and otherwise its default settings (local runner; empty values
dropped), so the train rows are known without the job: every row before the first
cut-off whose value is not empty.

Independent side: each train value's text is parsed by Python's ``float`` (correctly
rounded float64, as the job's parser), rounded to float32 as the job stores it; their
population mean and standard deviation are summed in float64 with math.fsum (two
passes), then rounded to float32. The manifest's ``normalisation`` must equal them
as float32, column by column; the script exits 1 otherwise. For comparison it also
prints ``Moments.mean_and_std()`` of the job's own exact sums over the same rows, and
what the job recorded before it took the analyzer's values: the mean and std read
back from the written transform_fn with two probe windows (all zeros, all ones;
``s = 1 / (z1 - z0)``, ``m = -z0 * s``).

Usage:

    python scripts/check_normalisation_stats.py --work_dir /tmp/check_normalisation
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

import numpy as np
from bench_common import (
    code_version,
    float64_mean_and_std,
    job_env,
    machine,
    read_json,
    read_manifest,
    timed_job_command,
)
from benchmark_timeseries import HOUR, START, ensure_input


def cutoffs(hours: int) -> tuple[np.datetime64, np.datetime64]:
    """The --split_times cut-offs: the hours at 80 % and 90 % of the span."""
    return START + round(0.8 * hours) * HOUR, START + round(0.9 * hours) * HOUR


def run_job(input_path: str, out: str, flags: dict[str, object], log: str) -> float:
    """Runs python -m pipelines.timeseries; returns its wall time (imports apart)."""
    timings = out + ".timings.json"
    argv = [f"--input={input_path}", f"--output_dir={out}", "--overwrite",
            *(f"--{k}={v}" for k, v in flags.items())]
    with open(log, "w") as f:
        result = subprocess.run(timed_job_command("pipelines.timeseries", argv, timings),
                                stdout=f, stderr=subprocess.STDOUT, env=job_env())
    if result.returncode != 0:
        with open(log, errors="replace") as f:
            raise RuntimeError(f"job failed (rc {result.returncode}):\n{f.read()[-3000:]}")
    return read_json(timings)["job_s"]


def train_values(input_path: str, first_validation: np.datetime64) -> np.ndarray:
    """``[rows, 1]`` float32: the values before ``first_validation``, empty ones left out.

    Each value text is parsed by Python's ``float`` (correctly rounded to float64),
    then rounded to float32.
    """
    import pandas as pd

    frame = pd.read_csv(input_path, usecols=["timestamp", "value"], dtype=str,
                        keep_default_na=False)
    times = pd.to_datetime(frame["timestamp"], format="%Y-%m-%d %H:%M:%S").to_numpy(
        "datetime64[s]")
    texts = frame["value"].to_numpy()
    keep = (times < first_validation) & (texts != "")
    return np.array([float(text) for text in texts[keep]], np.float64).astype(
        np.float32)[:, None]


def probed_mean_and_std(output_dir: str, flags: dict[str, object]
                        ) -> tuple[np.ndarray, np.ndarray]:
    """The old read-back: two probe windows through the written transform_fn."""
    import tensorflow as tf
    import tensorflow_transform as tft

    from etl.timeseries.preprocessing import SeriesPreprocessing

    config = SeriesPreprocessing(window_size=int(flags["window_size"]),
                                 horizon=int(flags["horizon"]), num_features=1,
                                 classification=False)
    probe = {}
    for name, spec in config.serving_feature_spec().items():
        if spec.dtype == tf.string:
            probe[name] = tf.constant([b"", b""])
        else:
            probe[name] = tf.stack([tf.zeros(spec.shape), tf.ones(spec.shape)])
    z = tft.TFTransformOutput(output_dir).transform_raw_features(probe)["window"].numpy()
    z0, z1 = z[0, 0].astype(np.float64), z[1, 0].astype(np.float64)
    std = 1.0 / (z1 - z0)
    return -z0 * std, std


def _relative(a: np.ndarray, b: np.ndarray) -> float:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.max(np.abs(a - b) / np.abs(b)))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--series", type=int, default=370)
    parser.add_argument("--hours", type=int, default=8760)
    parser.add_argument("--window_size", type=int, default=168)
    parser.add_argument("--shift", type=int, default=24)
    parser.add_argument("--horizon", type=int, default=24)
    parser.add_argument("--work_dir", default="/tmp/check_normalisation")
    args = parser.parse_args()

    os.makedirs(args.work_dir, exist_ok=True)
    input_path = ensure_input(args.work_dir, args.series, args.hours)
    first_validation, first_test = cutoffs(args.hours)
    flags = {"window_size": args.window_size, "shift": args.shift, "horizon": args.horizon,
             "split_times": f"{first_validation},{first_test}"}
    out = os.path.join(args.work_dir, "out")
    print(f"machine: {machine()}\ncode: {code_version()}\ndate: {time.strftime('%Y-%m-%d')}")
    print(f"running the job on {input_path} with {flags} ...", flush=True)
    seconds = run_job(input_path, out, flags, os.path.join(args.work_dir, "job.log"))
    manifest = read_manifest(out)
    recorded = manifest["normalisation"]
    manifest_mean = np.array(recorded["mean"], np.float32)
    manifest_std = np.array(recorded["std"], np.float32)

    from etl.core import exact_stats

    values = train_values(input_path, first_validation)
    mean64, std64 = float64_mean_and_std(values)
    exact_mean, exact_std = exact_stats.moments_of(values).mean_and_std()
    probe_mean, probe_std = probed_mean_and_std(out, flags)
    rows = [("manifest (analyzer's values)", recorded["mean"], recorded["std"]),
            ("independent float64 (fsum)", mean64.tolist(), std64.tolist()),
            ("  as float32", np.float32(mean64).tolist(), np.float32(std64).tolist()),
            ("job's exact_stats, same rows", exact_mean.tolist(), exact_std.tolist()),
            ("old probe read-back", probe_mean.tolist(), probe_std.tolist())]
    print(f"\n{manifest['inputs']:,} input rows, {len(values):,} train rows, job "
          f"{seconds:.1f} s")
    for name, mean, std in rows:
        print(f"{name:<30} mean {', '.join(f'{m:.9g}' for m in mean):<16} "
              f"std {', '.join(f'{s:.9g}' for s in std)}")
    equal = (np.array_equal(manifest_mean, np.float32(mean64))
             and np.array_equal(manifest_std, np.float32(std64)))
    print(f"\nmanifest vs independent float64: max relative difference mean "
          f"{_relative(manifest_mean, mean64):.3g}, std {_relative(manifest_std, std64):.3g}"
          f" (float32 rounding: up to 6e-8)")
    print(f"old probe vs independent float64: max relative difference mean "
          f"{_relative(probe_mean, mean64):.3g}, std {_relative(probe_std, std64):.3g}")
    print(f"manifest == independent as float32: {'PASS' if equal else 'FAIL'}")
    return 0 if equal else 1


if __name__ == "__main__":
    sys.exit(main())
