"""Checks the image job's target statistics against an independent float64 computation.

The statistics never touch image bytes: the job's analysis reads only each train
image's label and target moments. So this runs the job's own statistics path at
scale without images. A Beam pipeline (the job's runner and options: FnApiRunner,
default ``--direct_num_workers``) generates --rows synthetic manifest rows on its
workers, --chunk_rows per chunk, each chunk from a numpy RNG seeded by (--seed, chunk):
``path,split,age,price,visits``, the split drawn 80/10/10 (``train``, ``validation``,
``test``). Targets are text, as a CSV holds them: ``age`` 0-100 with one decimal
(normal, clipped), ``price`` lognormal around 1e5 with a heavy tail (cents), ``visits``
a count, 60 % zeros (negative binomial otherwise). Validation and test rows come
from shifted distributions (older, 3x the price, 5 more visits), so that rows
leaking into the statistics would show.

Job side, the image job's code for each step: the settings are
``ImageJob.from_options`` of ``--label_column=none --target_columns=age,price,visits``
(``--input`` a header-only manifest in --work_dir); each row becomes an
``ImageRecord`` through ``sources.record_from_row`` (CSV parsing of the targets:
``labels.parse_target``), then ``build_pipeline``'s own steps from ``AssignSplits`` to
the analysis: ``decide_split`` and the ``AnalyzeTrainImages`` composite, which writes
``transform_fn/`` and gives the ``targets`` entry (what the manifest records),
written to ``job_side.json`` with the train record count. ``build_pipeline`` itself
is not run: it reads images and writes shards.

Independent side: the driver regenerates the same rows from the same seeds, keeps
those whose split is ``train``, parses each target text with Python's ``float`` and
rounds it to float32 (what the job stores); per column, the population mean and
standard deviation summed in float64 with math.fsum (two passes), rounded to float32.
The entry's ``mean`` and ``std`` must equal them as float32. Then the written
``transform_fn``, pruned to ``target`` as the shard step prunes it
(``shard_step.load_transform_fn``), must map a target equal to the recorded mean to
exactly 0, and other values x (train rows, extremes) to exactly
``(float32(x) - mean) / std`` in float32: the analyzer's constants are the recorded
numbers. Exits 1 on any mismatch.

Usage:

    python scripts/check_target_stats.py --rows 1250000 --work_dir /tmp/check_target_stats

Further arguments are Beam flags (``--direct_num_workers=2``, ...).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import sys
import time
from collections.abc import Iterator, Sequence
from typing import Any

import apache_beam as beam
import numpy as np
from bench_common import code_version, float64_mean_and_std, machine, read_json

TARGET_COLUMNS = ("age", "price", "visits")
SPLIT_NAMES = ("train", "validation", "test")
SPLIT_PROBABILITIES = (0.8, 0.1, 0.1)
MANIFEST_HEADER = ("path", "split", *TARGET_COLUMNS)
JOB_SIDE_FILENAME = "job_side.json"
# Transformed-value probes drawn from the train rows, besides the mean and extremes.
NUM_PROBES = 10_000
# Their RNG stream: (--seed, _PROBE_STREAM); chunk c of the rows draws from (--seed, c).
_PROBE_STREAM = 2**31


# --- the synthetic rows, generated alike on the workers and in the driver ---------------

def chunk_size(rows: int, chunk_rows: int, chunk: int) -> int:
    """Rows in ``chunk``: ``chunk_rows``, the last chunk what is left."""
    return min(chunk_rows, rows - chunk * chunk_rows)


def chunk_texts(seed: int, chunk: int, size: int) -> tuple[np.ndarray, np.ndarray]:
    """``(split [size], target texts [size, 3])`` of one chunk, as a CSV holds them."""
    rng = np.random.default_rng([seed, chunk])
    split = rng.choice(len(SPLIT_NAMES), size=size, p=SPLIT_PROBABILITIES)
    held_out = split != 0
    age = np.clip(rng.normal(38.0, 20.0, size) + 15.0 * held_out, 0.0, 100.0)
    price = rng.lognormal(math.log(1e5), 1.2, size) * np.where(held_out, 3.0, 1.0)
    visits = np.where(rng.random(size) < 0.6, 0, rng.negative_binomial(2, 0.3, size))
    visits = visits + 5 * held_out
    texts = np.stack([np.char.mod("%.1f", age), np.char.mod("%.2f", price),
                      np.char.mod("%d", visits)], axis=1)
    return np.array(SPLIT_NAMES)[split], texts


def chunk_records(chunk: int, *, seed: int, rows: int, chunk_rows: int,
                  manifest_dir: str, job: Any) -> Iterator[Any]:
    """One chunk's manifest rows → ``ImageRecord``s, as the job reads a CSV row
    (``record_from_row``; a row it would reject is yielded as its ``Rejection``)."""
    from etl.images.sources import record_from_row

    splits, texts = chunk_texts(seed, chunk, chunk_size(rows, chunk_rows, chunk))
    for index, (split, row_texts) in enumerate(zip(splits, texts, strict=True)):
        path = f"images/{chunk:05d}/{index:06d}.jpg"
        row = dict(zip(MANIFEST_HEADER, (path, str(split), *map(str, row_texts)),
                       strict=True))
        yield record_from_row(row, manifest_dir, f"synthetic:{chunk}:{index}",
                              job.allow_outside_root, job.columns, from_csv=True)


def independent_train_values(seed: int, rows: int, chunk_rows: int) -> np.ndarray:
    """``[train rows, 3]`` float32: each train target text through ``float``, then
    rounded to float32, without the job's code."""
    parts = []
    for chunk in range(math.ceil(rows / chunk_rows)):
        splits, texts = chunk_texts(seed, chunk, chunk_size(rows, chunk_rows, chunk))
        train = texts[splits == "train"]
        parts.append(np.array([float(text) for text in train.ravel()],
                              np.float64).reshape(train.shape).astype(np.float32))
    return np.concatenate(parts)


# --- the job side ------------------------------------------------------------------------

def _job_side(entry: dict[str, Any], train_instances: int, rejected: int
              ) -> dict[str, Any]:
    return {**entry, "train_instances": train_instances, "rejected": rejected}


def _write_job_side(result: dict[str, Any], path: str) -> None:
    # Plain json: worker processes (multi_processing) cannot import the sibling
    # bench_common, and functions of this script travel to them by value.
    with open(path, "w") as f:
        json.dump(result, f, indent=2, sort_keys=True)


def build_statistics_pipeline(pipeline: beam.Pipeline, job: Any, *, seed: int, rows: int,
                              chunk_rows: int, manifest_dir: str, job_side_path: str
                              ) -> None:
    """The synthetic rows, then ``pipelines.images.build_pipeline``'s steps from
    ``AssignSplits`` to the analysis and the ``targets`` entry."""
    from etl.core.dead_letters import REJECTED
    from pipelines import images

    # ImageRecord (split from the manifest's column) or Rejection.
    records = (
        pipeline
        | "ChunkIds" >> beam.Create(range(math.ceil(rows / chunk_rows)))
        | "GenerateRecords" >> beam.FlatMap(
            chunk_records, seed=seed, rows=rows, chunk_rows=chunk_rows,
            manifest_dir=manifest_dir, job=job)
    )
    decided = records | "AssignSplits" >> beam.FlatMap(
        images.decide_split, fractions=job.output.fractions,
        allowed_labels=job.allowed_labels).with_outputs(REJECTED, main="records")
    # The job's own analysis composite: transform_fn/ and the targets entry.
    _, targets_entry = decided.records | "AnalyzeLabels" >> images.AnalyzeTrainImages(job)
    train_count = (decided.records
                   | "TrainRecords" >> beam.Filter(lambda r: r.split == "train")
                   | "CountTrain" >> beam.combiners.Count.Globally())
    rejected_count = decided[REJECTED] | "CountRejected" >> beam.combiners.Count.Globally()
    _ = (
        targets_entry
        | "JobSide" >> beam.Map(_job_side, beam.pvalue.AsSingleton(train_count),
                                beam.pvalue.AsSingleton(rejected_count))
        | "WriteJobSide" >> beam.Map(_write_job_side, job_side_path)
    )


def run_job_side(args: argparse.Namespace, beam_args: Sequence[str]) -> tuple[Any, float]:
    """Runs the statistics pipeline; returns the image job's settings and the wall
    time of the run (graph construction included)."""
    from pipelines import images, runner_defaults

    manifest = os.path.join(args.work_dir, "manifest.csv")
    with open(manifest, "w") as f:
        f.write(",".join(MANIFEST_HEADER) + "\n")  # Header only: the rows are generated.
    output_dir = os.path.join(args.work_dir, "out")
    shutil.rmtree(output_dir, ignore_errors=True)
    argv = [f"--input={manifest}", f"--output_dir={output_dir}", "--label_column=none",
            f"--target_columns={','.join(TARGET_COLUMNS)}", *beam_args]
    images.run_ops_on_one_thread_each()
    started = time.perf_counter()
    options = runner_defaults.pipeline_options(argv, images.ImagesOptions)
    job = images.ImageJob.from_options(options.view_as(images.ImagesOptions))
    pipeline = beam.Pipeline(options=options)
    build_statistics_pipeline(
        pipeline, job, seed=args.seed, rows=args.rows, chunk_rows=args.chunk_rows,
        manifest_dir=os.path.dirname(manifest),
        job_side_path=os.path.join(args.work_dir, JOB_SIDE_FILENAME))
    runner_defaults.run_to_completion(pipeline)
    return job, time.perf_counter() - started


# --- the checks ----------------------------------------------------------------------------

def transform_mismatches(transform_fn_dir: str, mean: np.ndarray, std: np.ndarray,
                         train_values: np.ndarray, seed: int) -> tuple[int, int]:
    """Probes through ``transform_fn`` pruned to ``target``: the recorded mean (must
    give 0), train rows and extremes (must give ``(x - mean) / std`` in float32).

    Returns:
        ``(probes, mismatching values)``.
    """
    import tensorflow as tf

    from etl.core.shard_step import load_transform_fn
    from reader import contract

    rng = np.random.default_rng([seed, _PROBE_STREAM])
    extremes = np.array([[0.0, 0.01, 0.0], [100.0, 1e9, 1000.0], [-1.0, -1e5, -3.0]],
                        np.float32)
    probes = np.concatenate([mean[None, :], extremes,
                             train_values[rng.integers(len(train_values), size=NUM_PROBES)]])
    transform = load_transform_fn(transform_fn_dir,
                                  input_keys=[contract.RAW_SOURCE_KEY, contract.TARGET_KEY],
                                  output_keys=[contract.TARGET_KEY])
    got = transform({contract.RAW_SOURCE_KEY: tf.constant([b"probe"] * len(probes)),
                     contract.TARGET_KEY: tf.constant(probes)})[contract.TARGET_KEY]
    expected = (probes - mean) / std  # float32 arithmetic throughout
    bad = int(np.sum(got.view(np.uint32) != expected.astype(np.float32).view(np.uint32)))
    if not np.all(got[0] == 0):
        bad += 1
    return len(probes), bad


def _relative(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return np.abs(a - b) / np.abs(b)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_250_000,
                        help="Manifest rows generated, all splits (~80 %% train).")
    parser.add_argument("--chunk_rows", type=int, default=50_000,
                        help="Rows generated per chunk (one element of the pipeline).")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--work_dir", default="/tmp/check_target_stats")
    args, beam_args = parser.parse_known_args()

    started = time.perf_counter()
    os.makedirs(args.work_dir, exist_ok=True)
    print(f"machine: {machine()}\ncode: {code_version()}\ndate: {time.strftime('%Y-%m-%d')}")
    print(f"running the job's statistics path on {args.rows:,} generated rows "
          f"(seed {args.seed}) ...", flush=True)
    job, job_s = run_job_side(args, beam_args)
    job_side = read_json(os.path.join(args.work_dir, JOB_SIDE_FILENAME))
    recorded = job_side["targets"]
    manifest_mean = np.array(recorded["mean"], np.float32)
    manifest_std = np.array(recorded["std"], np.float32)

    values = independent_train_values(args.seed, args.rows, args.chunk_rows)
    mean64, std64 = float64_mean_and_std(values)
    probes, bad = transform_mismatches(
        os.path.join(job.output.output_dir, "transform_fn"), manifest_mean, manifest_std,
        values, args.seed)

    print(f"\n{args.rows:,} rows, train rows: job {job_side['train_instances']:,}, "
          f"independent {len(values):,}; rejected {job_side['rejected']:,}; "
          f"job side {job_s:.1f} s")
    print(f"{'column':<8} {'':<5} {'manifest (float32)':>20} {'independent float64':>24} "
          f"{'as float32':>16} {'rel diff':>9}")
    for i, name in enumerate(recorded["columns"]):
        for stat, recorded_value, value64 in (("mean", manifest_mean[i], mean64[i]),
                                              ("std", manifest_std[i], std64[i])):
            print(f"{name:<8} {stat:<5} {float(recorded_value):>20.9g} {value64:>24.17g} "
                  f"{float(np.float32(value64)):>16.9g} "
                  f"{float(_relative(recorded_value, value64)):>9.2g}")
    equal = (np.array_equal(manifest_mean, np.float32(mean64))
             and np.array_equal(manifest_std, np.float32(std64)))
    counts = (job_side["train_instances"] == len(values) and job_side["rejected"] == 0
              and recorded["columns"] == list(TARGET_COLUMNS))
    print(f"\nmanifest vs independent float64: max relative difference mean "
          f"{float(np.max(_relative(manifest_mean, mean64))):.3g}, std "
          f"{float(np.max(_relative(manifest_std, std64))):.3g} "
          f"(float32 rounding: up to 6e-8)")
    print(f"manifest == independent as float32: {'PASS' if equal else 'FAIL'}")
    print(f"train rows and columns agree, nothing rejected: {'PASS' if counts else 'FAIL'}")
    print(f"transform_fn applies the recorded mean/std, {probes:,} probes (mean -> 0, "
          f"bit-exact (x - mean) / std): {'PASS' if bad == 0 else f'FAIL ({bad} differ)'}")
    print(f"wall time {time.perf_counter() - started:.1f} s")
    return 0 if equal and counts and bad == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
