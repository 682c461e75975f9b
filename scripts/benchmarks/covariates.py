"""Forecasting with covariates at scale: the job against a one-process pandas script.

Input: generated M5-shaped long-format CSV (--series series × --days days, one row
per (series, day): series_id, date, sales (a count), price and promo (known in
advance), visits (observed only), event (a category known in advance, empty on most
days, as in M5), store_id, item_id (categories constant per series), store_size and
item_weight (reals constant per series)), written once into --work_dir. Both sides
do the same work with the same roles (--target_columns=sales --past_columns=visits
--known_columns=price,promo --known_categorical_columns=event
--static_categorical_columns=store_id,item_id
--static_real_columns=store_size,item_weight
--calendar_features=day_of_week,month,day_of_year --target_transform=log1p,
--window_size=28 --horizon=7 --shift=7): read the CSV, sort each series by date,
split it 80/10/10 by time, fit the z-score of every real column and the vocabulary
of every categorical on the train rows (log1p of sales first), cut the window,
target, known (with the calendar features), known_cat and static blocks with
target_scale, then serialize one tf.train.Example per window and write GZIP
TFRecords.

  reference  this file run with --reference: pandas.read_csv, numpy per series
             (sliding_window_view), tf.train.Example protos, one TFRecordWriter
             (GZIP) per split; one process. It also reports ``arrays_s``: its time
             until every block's arrays exist, before any example is serialized;
  job        python -m pipelines.timeseries with these flags, default runner.

Times exclude interpreter start and imports; peak RSS is ru_maxrss of a fresh
wrapper process's only child (scripts/benchmarks/memory.py). Rounds alternate the two.
Both outputs are checked to hold the same windows per split, the same train
statistics of the target and the same vocabulary sizes.

Targets (PASS/FAIL, the issue's): job rows/s >= --min_ratio (1.5) x the reference's
(whole script, and, reported beside it, arrays only); job peak RSS <= --max_peak_gb (2).

Usage:

    nice -n 19 python -m scripts.benchmarks covariates --work_dir /tmp/bench_m5 \\
        --series 10000 --days 1200 --rounds 1
"""

from __future__ import annotations

import argparse
import itertools
import os
import shutil
import statistics
import time

import numpy as np

from scripts.benchmarks import harness
from scripts.benchmarks import series_job as series_bench

BENCHMARK = harness.Benchmark(
    name="covariates",
    measures="forecasting with covariates (M5-shaped) against a pandas + NumPy script",
    quick=("--work_dir", "{quick_dir}/m5", "--series", "50", "--days", "200", "--rounds", "1",
           "--out", "{quick_dir}/covariates.json"),
)


ROLES = {"timestamp_column": "date", "target_columns": "sales", "past_columns": "visits",
         "known_columns": "price,promo", "known_categorical_columns": "event",
         "static_categorical_columns": "store_id,item_id",
         "static_real_columns": "store_size,item_weight",
         "calendar_features": "day_of_week,month,day_of_year", "target_transform": "log1p"}
REALS = ["sales", "visits", "price", "promo", "store_size", "item_weight"]
CATEGORICALS = ["event", "store_id", "item_id"]
EVENTS = [f"event{k}" for k in range(30)]  # M5 has 30 event names


# --- input -----------------------------------------------------------------------------

def generate(path: str, series: int, days: int, quoted: bool, seed: int = 0,
             block: int = 500) -> int:
    """Writes the CSV, series by series, strings unquoted as M5's own files and
    pandas write them (``quoted``: every string quoted, as pyarrow and R do); returns
    its rows."""
    import pyarrow as pa
    import pyarrow.csv as pacsv

    rng = np.random.default_rng(seed)
    dates = np.datetime_as_string(np.datetime64("2011-01-29") + np.arange(days), unit="D")
    weekend = ((np.arange(days) + 5) % 7 >= 5).astype(np.float64)  # 2011-01-29: Saturday
    event = np.where(rng.random(days) < 0.08, rng.choice(EVENTS, days), "")
    tmp = path + ".tmp"
    with pa.OSFile(tmp, "wb") as sink:
        writer = None
        for first in range(0, series, block):
            n = min(block, series - first)
            ids = np.array([f"item{i // 10}_store{i % 10}" for i in range(first, first + n)])
            base_price = np.round(rng.uniform(1, 10, n), 2)[:, None]
            promo = (rng.random((n, days)) < 0.1).astype(np.float64)
            price = np.round(base_price * (1 - 0.25 * promo), 2)
            level = rng.uniform(0.5, 20, (n, 1)) * (1 + 0.3 * weekend)
            expected = level * (1 + 1.5 * promo) * np.sqrt(base_price / price)
            table = pa.table({
                "series_id": np.repeat(ids, days), "date": np.tile(dates, n),
                "sales": rng.poisson(expected).astype(np.float64).ravel(),
                "price": price.ravel(), "promo": promo.ravel(),
                "visits": np.round(expected * 10 + rng.normal(0, 1, (n, days)), 1).ravel(),
                "event": np.tile(event, n),
                "store_id": np.repeat([f"store{i % 10}" for i in range(first, first + n)],
                                      days),
                "item_id": np.repeat([f"item{i // 10}" for i in range(first, first + n)],
                                     days),
                "store_size": np.repeat(100.0 + 37 * (np.arange(first, first + n) % 10), days),
                "item_weight": np.repeat(np.round(0.1 * (np.arange(first, first + n) // 10
                                                         % 50 + 1), 1), days)})
            if writer is None:
                writer = pacsv.CSVWriter(sink, table.schema, write_options=pacsv.WriteOptions(
                    quoting_style="needed" if quoted else "none"))
            writer.write_table(table)
        writer.close()
    os.replace(tmp, path)
    return series * days


def ensure_input(work_dir: str, series: int, days: int, quoted: bool) -> str:
    path = os.path.join(work_dir,
                        f"m5cat{'_quoted' if quoted else ''}_{series}x{days}.csv")
    if not os.path.exists(path):
        print(f"generating {path} ...", flush=True)
        generate(path, series, days, quoted)
    return path


# --- the reference ---------------------------------------------------------------------

def _calendar(dates: np.ndarray) -> np.ndarray:
    import pandas as pd

    index = pd.DatetimeIndex(dates)
    return np.stack([index.day_of_week / 6 - 0.5, (index.month - 1) / 11 - 0.5,
                     (index.day_of_year - 1) / 365 - 0.5], axis=-1).astype(np.float32)


def _vocabulary(train: np.ndarray) -> dict[str, int]:
    """text → id, as tft.vocabulary orders them: most rows first, ties in reverse
    byte order."""
    import pandas as pd

    counts = sorted(pd.Series(train).value_counts().items(),
                    key=lambda kv: (kv[1], kv[0].encode()), reverse=True)
    return {text: index for index, (text, _) in enumerate(counts)}


def _blocks(values: np.ndarray, ids: np.ndarray, dates: np.ndarray, mean: np.ndarray,
            std: np.ndarray, window: int, horizon: int, shift: int
            ) -> dict[str, np.ndarray]:
    """Every block of one piece's windows ``[n, ...]`` (``ids``: categorical ids)."""
    from numpy.lib.stride_tricks import sliding_window_view

    z = ((values - mean) / std).astype(np.float32)
    span = window + horizon
    cut = sliding_window_view(z, span, axis=0)[::shift].transpose(0, 2, 1)  # [n, span, F]
    known_cat = sliding_window_view(ids[:, :1], span, axis=0)[::shift].transpose(0, 2, 1)
    calendar = sliding_window_view(_calendar(dates), span, axis=0)[::shift].transpose(0, 2, 1)
    n = len(cut)
    return {"window": cut[:, :window, :2], "target": cut[:, window:, :1],
            "known": np.concatenate([cut[:, :, 2:4], calendar], axis=-1),
            "static_real": cut[:, 0, 4:], "known_cat": known_cat,
            "static_cat": np.broadcast_to(ids[0, 1:], (n, 2)),
            "target_scale": np.broadcast_to(np.float32([[mean[0], std[0]]]), (n, 1, 2)),
            "starts": dates[:len(dates) - span + 1:shift][:n]}


def reference(input_path: str, output_dir: str, window: int, shift: int, horizon: int
              ) -> dict:
    """The same work as the job, as a plain one-process script; returns its timings."""
    import pandas as pd
    import tensorflow as tf

    started = time.perf_counter()
    frame = pd.read_csv(input_path, dtype={"series_id": str, "date": str,
                                           **{c: np.float64 for c in REALS},
                                           **{c: str for c in CATEGORICALS}})
    frame = frame.sort_values(["series_id", "date"], kind="stable", ignore_index=True)
    series = frame["series_id"].to_numpy()
    dates = frame["date"].to_numpy()
    values = frame[REALS].to_numpy(np.float32).astype(np.float64)
    values[:, 0] = np.log1p(values[:, 0])
    bounds = [0, *(np.flatnonzero(series[1:] != series[:-1]) + 1).tolist(), len(series)]
    edges = {}
    for a, b in itertools.pairwise(bounds):
        n = b - a
        edges[a] = [("train", a, a + round(n * 0.8)),
                    ("validation", a + round(n * 0.8), a + round(n * 0.9)),
                    ("test", a + round(n * 0.9), b)]
    train_rows = np.concatenate([np.arange(lo, hi) for parts in edges.values()
                                 for split, lo, hi in parts if split == "train"])
    train = values[train_rows]
    mean, std = train.mean(axis=0), train.std(axis=0)
    std = np.where(std > 0, std, 1.0)
    texts = frame[CATEGORICALS].fillna("")  # an empty cell is the category ""
    vocabularies = [_vocabulary(texts[c].to_numpy()[train_rows]) for c in CATEGORICALS]
    ids = np.stack([texts[c].map(v).fillna(len(v)).to_numpy(np.int64)
                    for c, v in zip(CATEGORICALS, vocabularies, strict=True)], axis=1)
    pieces = {"train": [], "validation": [], "test": []}
    for a, parts in edges.items():
        for split, lo, hi in parts:
            if hi - lo >= window + horizon:
                pieces[split].append((series[a], _blocks(
                    values[lo:hi], ids[lo:hi], dates[lo:hi], mean, std, window, horizon,
                    shift)))
    arrays_s = time.perf_counter() - started
    counts = {}
    os.makedirs(output_dir, exist_ok=True)
    options = tf.io.TFRecordOptions(compression_type="GZIP")

    def floats(array: np.ndarray) -> tf.train.Feature:
        return tf.train.Feature(float_list=tf.train.FloatList(value=array.ravel()))

    def ints(array: np.ndarray) -> tf.train.Feature:
        return tf.train.Feature(int64_list=tf.train.Int64List(value=array.ravel()))

    for split, split_pieces in pieces.items():
        counts[split] = 0
        path = os.path.join(output_dir, f"{split}.tfrecord.gz")
        with tf.io.TFRecordWriter(path, options) as writer:
            for series_id, blocks in split_pieces:
                sid = series_id.encode()
                for i, start in enumerate(blocks["starts"].tolist()):
                    start = start.encode()
                    feature = {name: floats(blocks[name][i]) for name in (
                        "window", "target", "known", "static_real", "target_scale")}
                    feature.update({name: ints(blocks[name][i])
                                    for name in ("known_cat", "static_cat")})
                    feature.update({
                        "series_id": tf.train.Feature(bytes_list=tf.train.BytesList(
                            value=[sid])),
                        "window_start": tf.train.Feature(bytes_list=tf.train.BytesList(
                            value=[start])),
                        "key": tf.train.Feature(bytes_list=tf.train.BytesList(
                            value=[sid + b"@" + start]))})
                    writer.write(tf.train.Example(features=tf.train.Features(
                        feature=feature)).SerializeToString())
                    counts[split] += 1
    return {"seconds": time.perf_counter() - started, "arrays_s": arrays_s,
            "rows": len(frame), "windows": counts, "mean": float(np.float32(mean[0])),
            "std": float(np.float32(std[0])),
            "vocabulary_sizes": {c: len(v) for c, v in zip(CATEGORICALS, vocabularies,
                                                             strict=True)}}


# --- measuring -------------------------------------------------------------------------

def run_reference(input_path: str, out: str, log: str, flags: dict) -> dict:
    result = series_bench.run_reference(input_path, out, log, flags, script=__file__)
    shutil.rmtree(out, ignore_errors=True)
    return result


def run_job(input_path: str, out: str, log: str, flags: dict, extra: list[str]) -> dict:
    timings_path = out + ".timings.json"
    argv = [f"--input={input_path}", f"--output_dir={out}", "--overwrite",
            *(f"--{k}={v}" for k, v in {**ROLES, **flags}.items()), *extra]
    result = series_bench._measured(
        harness.timed_job_command("pipelines.timeseries", argv, timings_path), log, timings_path,
        "job")
    del result["import_s"]
    seconds = result.pop("job_s")
    manifest = harness.read_manifest(out)
    summary = harness.output_summary(manifest)
    shutil.rmtree(out, ignore_errors=True)
    return {**result, "seconds": seconds, "rows": manifest["inputs"],
            "windows": {s: manifest["splits"][s]["num_records"] for s in manifest["splits"]},
            "mean": manifest["normalisation"]["mean"][0],
            "std": manifest["normalisation"]["std"][0],
            "vocabulary_sizes": {c: manifest["categories"][c]["size"] for c in CATEGORICALS},
            "shards": summary["shards"], "output_mib": summary["output_mib"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    series_bench.add_reference_flag(parser)
    parser.add_argument("--series", type=int, default=10000)
    parser.add_argument("--days", type=int, default=1200)
    parser.add_argument("--window_size", type=int, default=28)
    parser.add_argument("--shift", type=int, default=7)
    parser.add_argument("--horizon", type=int, default=7)
    harness.add_sampling_flags(parser, rounds=1)
    parser.add_argument("--max_wait", type=float, default=300)
    parser.add_argument("--min_ratio", type=float, default=1.5)
    parser.add_argument("--max_peak_gb", type=float, default=2.0)
    parser.add_argument("--job_flags", default="",
                        help="More flags for the job only, space-separated (e.g. "
                             "'--gzip_level=1 --direct_num_workers=2').")
    parser.add_argument("--quoted", action="store_true",
                        help="Quote every string of the CSV (pyarrow's and R's default).")
    parser.add_argument("--reference_from",
                        help="Time the job only, against the reference samples of this "
                             "setting's entry in --out (an earlier run on the same input).")
    parser.add_argument("--work_dir", default="/tmp/bench_m5")
    harness.add_result_flags(parser, "covariates", "<series>x<days>, and _quoted with --quoted")
    args = parser.parse_args()

    if series_bench.ran_reference(args, reference):
        return

    os.makedirs(args.work_dir, exist_ok=True)
    flags = {"window_size": args.window_size, "shift": args.shift, "horizon": args.horizon}
    data = ensure_input(args.work_dir, args.series, args.days, args.quoted)
    out_root, logs = (os.path.join(args.work_dir, d) for d in ("out", "logs"))
    os.makedirs(logs, exist_ok=True)
    runners = {
        "reference": lambda r: run_reference(data, os.path.join(out_root, "reference"),
                                             os.path.join(logs, f"reference_{r}.log"), flags),
        "job": lambda r: run_job(data, os.path.join(out_root, "job"),
                                 os.path.join(logs, f"job_{r}.log"), flags,
                                 args.job_flags.split()),
    }
    samples: dict[str, list[dict]] = {name: [] for name in runners}
    if args.reference_from:  # An earlier run's reference samples, same input.
        earlier = harness.read_settings(args.out)[args.reference_from]
        assert earlier["input"]["rows"] == args.series * args.days, "another input"
        samples["reference"] = earlier["samples"]["reference"]
        del runners["reference"]
    for r, name in harness.interleaved(list(runners), args.rounds):
        record = series_bench.sample(lambda name=name, r=r: runners[name](r), args)
        samples[name].append(record)
        print(f"round {r + 1}/{args.rounds} {name:<9} {record['seconds']:7.2f} s "
              f"{record['rows'] / record['seconds']:>11,.0f} rows/s  peak RSS "
              f"{record['peak_rss_mib']:7.1f} MiB  windows {record['windows']}  "
              f"(other processes: {record['foreign_cores']:.2f} cores)", flush=True)

    def median(name: str, key: str) -> float:
        return statistics.median(s[key] for s in samples[name])

    job_s, reference_s = median("job", "seconds"), median("reference", "seconds")
    arrays_s = median("reference", "arrays_s")
    peak = median("job", "peak_rss_mib")
    first = samples["reference"][0]
    same = all(s["windows"] == first["windows"] and abs(s["mean"] - first["mean"])
               <= 1e-5 * abs(first["mean"]) and abs(s["std"] - first["std"])
               <= 1e-5 * first["std"]
               and s["vocabulary_sizes"] == first["vocabulary_sizes"] for s in samples["job"])
    targets = {
        "ratio": {"value": round(reference_s / job_s, 3), "min": args.min_ratio,
                  "pass": reference_s / job_s >= args.min_ratio},
        "ratio_to_arrays_only": {"value": round(arrays_s / job_s, 3), "min": args.min_ratio,
                                 "pass": arrays_s / job_s >= args.min_ratio},
        "peak": {"value_mib": peak, "max_bytes": args.max_peak_gb * 1e9,
                 "pass": peak * harness.MIB <= args.max_peak_gb * 1e9},
        "same_output": {"pass": same},
    }
    print(f"job {job_s:.1f} s (peak RSS {peak:.0f} MiB), reference {reference_s:.1f} s "
          f"(arrays built at {arrays_s:.1f} s; peak RSS "
          f"{median('reference', 'peak_rss_mib'):.0f} MiB)")
    for name, target in targets.items():
        print(f"target {name}: {target} -> {'PASS' if target['pass'] else 'FAIL'}")
    harness.write_result(args.out, args.setting or (
        f"{args.series}x{args.days}" + ("_quoted" if args.quoted else "")), chart=CHART,
        result={
        "script": "scripts/benchmarks/covariates.py", "machine": harness.machine(),
        "code": harness.code_version(), "date": time.strftime("%Y-%m-%d"),
        "input": {"series": args.series, "days": args.days, "rows": first["rows"],
                  "quoted": args.quoted,
                  "bytes": os.path.getsize(data)},
        "roles": ROLES, "flags": flags, "job_flags": args.job_flags,
        "reference_from": args.reference_from, "samples": samples,
        "targets": targets})
    print(f"wrote {args.out}")


CHART = harness.Chart("job and script", lambda result: {
    name: harness.spread((s["seconds"] for s in samples), higher_is_better=False)
    for name, samples in result["samples"].items()}, unit="s", value_format=".0f")


if __name__ == "__main__":
    main()
