"""The series step on a few literal rows, in a ``TestPipeline``.

``ReadSeriesChunks`` → ``GroupByKey`` → ``ProcessSeriesBucket``, wired as the job
wires them: each cleaning policy's runs of windows, spilled rows, rejections and
counters, against values worked out by hand from the rows.
"""

from __future__ import annotations

import json
import math
import os

import apache_beam as beam
import numpy as np
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to

from etl.core import dead_letters
from etl.core.shards.splits import SplitFractions
from etl.timeseries.buckets import STATS, ProcessSeriesBucket, SeriesSettings
from etl.timeseries.rows import read
from etl.timeseries.rows.sources import Columns
from etl.timeseries.runs import read_run
from etl.timeseries.series import Cleaning, TimeSplit, Windowing
from etl.timeseries.window_examples import WindowSchema

# Never the plain DirectRunner: it first tries to download Prism, which stalls offline.
RUNNER = "apache_beam.runners.portability.fn_api_runner.FnApiRunner"
COLUMNS = Columns("series_id", "timestamp", ("value",))
ALL_TRAIN = TimeSplit("time", SplitFractions(1.0, 0.0, 0.0))


def _rows(series_id: str, values, times=None) -> list[dict]:
    times = range(len(values)) if times is None else times
    return [{"series_id": series_id, "timestamp": t, "value": v}
            for t, v in zip(times, values, strict=True)]


def _run_summary(run) -> tuple:
    """A run as (split, first window's key, windows, its rows' first column)."""
    values = read_run(run, num_features=1).values
    return run.split, run.key, run.num_windows, [float(v) for v in values[:, 0]]


def _counters_include(expected: dict[str, int]):
    def check(actual: list[tuple[str, int]]) -> None:
        totals = dict(actual)
        assert {name: totals.get(name, 0) for name in expected} == expected, totals
    return check


def _process(tmp_path, rows: list[dict], cleaning: Cleaning, windowing: Windowing,
             runs: list[tuple], rejected: list[tuple[str, str]],
             counters: dict[str, int]) -> None:
    path = os.path.join(tmp_path, "rows.jsonl")
    with open(path, "w") as f:
        f.writelines(json.dumps(row) + "\n" for row in rows)
    plan = read.InputPlan.from_pattern(path, COLUMNS)
    settings = SeriesSettings(
        windowing=windowing, cleaning=cleaning, time_split=ALL_TRAIN,
        schema=WindowSchema(windowing.window_size, windowing.horizon, 1, False),
        spill_dir=os.path.join(tmp_path, "series"))
    with TestPipeline(runner=RUNNER) as p:
        chunks = p | read.ReadSeriesChunks(plan, COLUMNS, os.path.join(tmp_path, "rows"))
        processed = (
            chunks.chunks
            | beam.GroupByKey()
            | beam.ParDo(ProcessSeriesBucket(settings, plan.files, plan.fmt), labels={}
                         ).with_outputs(dead_letters.REJECTED, STATS, main="runs"))
        assert_that(processed.runs | "Summarise" >> beam.Map(_run_summary), equal_to(runs),
                    label="CheckRuns")
        assert_that(processed[dead_letters.REJECTED]
                    | "KeyReason" >> beam.Map(lambda r: (r.key, r.reason)),
                    equal_to(rejected), label="CheckRejected")
        assert_that(processed[STATS] | beam.CombinePerKey(sum), _counters_include(counters),
                    label="CheckCounters")


def test_duplicates_reject_rejects_every_row_of_the_timestamp_and_cuts_there(tmp_path):
    values = [float(i) for i in range(30)]
    rows = _rows("d", values) + _rows("d", [99.0, 98.0], times=[12, 12])
    # Row 12 is gone, so the series is cut into 0-11 and 13-29: 8 + 13 windows of span 5.
    _process(tmp_path, rows, Cleaning(duplicates="reject"), Windowing(4, horizon=1),
             runs=[("train", "d@0", 8, values[:12]), ("train", "d@13", 13, values[13:])],
             rejected=[("d@12", "duplicate_timestamp")] * 3,
             counters={"rows_read": 32, "rows_rejected": 3, "rows_kept": 29,
                       "windows_train": 21})


def test_missing_ffill_copies_the_previous_value_and_drops_leading_missing_rows(tmp_path):
    values = [float(i) for i in range(20)]
    values[0] = values[7] = values[8] = None
    filled = [1.0, 2, 3, 4, 5, 6, 6, 6, *range(9, 20)]  # rows 1-19
    _process(tmp_path, _rows("f", values), Cleaning(missing="ffill", max_gap="none"),
             Windowing(18, horizon=1),
             runs=[("train", "f@1", 1, [float(v) for v in filled])], rejected=[],
             counters={"values_filled": 2, "rows_dropped_missing": 1, "rows_kept": 19})


def test_missing_drop_removes_the_row_and_cuts_the_series_there(tmp_path):
    values = [float(i) for i in range(30)]
    values[10] = None
    # Pieces 0-9 and 11-29: 6 + 15 windows of span 5.
    _process(tmp_path, _rows("m", values), Cleaning(missing="drop"), Windowing(4, horizon=1),
             runs=[("train", "m@0", 6, values[:10]), ("train", "m@11", 15, values[11:])],
             rejected=[], counters={"rows_dropped_missing": 1, "gaps_split": 1})


def test_missing_interpolate_is_linear_in_time(tmp_path):
    values = [float(i) for i in range(12)]
    values[6] = None
    _process(tmp_path, _rows("i", values), Cleaning(missing="interpolate"),
             Windowing(11, horizon=1),
             runs=[("train", "i@0", 1, [float(i) for i in range(12)])], rejected=[],
             counters={"values_filled": 1, "rows_kept": 12})


def test_max_gap_number_cuts_at_longer_steps_only(tmp_path):
    times = [*range(0, 20, 2), *range(23, 43, 2), *range(100, 120, 2)]  # steps 2, 3, 57
    values = [float(t) for t in times]
    # Three 10-row pieces: 7 windows of span 4 each, none across a gap.
    _process(tmp_path, _rows("g", values, times), Cleaning(max_gap=2.5),
             Windowing(3, horizon=1),
             runs=[("train", "g@0", 7, values[:10]), ("train", "g@23", 7, values[10:20]),
                   ("train", "g@100", 7, values[20:])],
             rejected=[], counters={"gaps_split": 2, "rows_kept": 30})


def test_missing_reject_dead_letters_the_row_and_counts_every_input_row_once(tmp_path):
    # With --max_gap=none the rows either side of the rejected one stay one piece.
    values = [float(i) for i in range(12)]
    values[5] = math.nan
    rows = _rows("r", [None if math.isnan(v) else v for v in values])
    _process(tmp_path, rows, Cleaning(missing="reject", max_gap="none"),
             Windowing(4, horizon=1),
             runs=[("train", "r@0", 7, [float(v) for v in np.delete(values, 5)])],
             rejected=[("r@5", "missing_value")],
             counters={"rows_read": 12, "rows_rejected": 1, "rows_kept": 11})


def test_missing_reject_and_auto_gaps_cut_at_the_rejected_row_and_at_long_steps(tmp_path):
    values = [float(i) for i in range(40)]
    values[5] = None
    rows = _rows("g", values[:20]) + _rows("g", values[20:], times=range(1000, 1020))
    # Two steps beyond 1.5 × the median step: 4 → 6 (row 5 rejected) and 19 → 1000.
    # Pieces 0-4 | 6-19 | 1000-1019 hold 5, 14 and 20 rows; span 5 → 1 + 10 + 16 windows.
    _process(tmp_path, rows, Cleaning(missing="reject"), Windowing(4, horizon=1),
             runs=[("train", "g@0", 1, values[:5]), ("train", "g@6", 10, values[6:20]),
                   ("train", "g@1000", 16, values[20:])],
             rejected=[("g@5", "missing_value")],
             counters={"gaps_split": 2, "rows_rejected": 1, "windows_train": 27})
