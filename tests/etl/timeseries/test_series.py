"""Unit tests of etl/timeseries/series.py: cleaning, gaps, splits and windows."""

from __future__ import annotations

import dataclasses
import itertools
import math

import numpy as np
import pytest

from etl.core.shards import splits
from etl.timeseries.rows.sources import Row
from etl.timeseries.rows.time_texts import TimeTexts
from etl.timeseries.series import (
    Cleaning,
    CleanSeries,
    Segment,
    TimeSplit,
    Windowing,
    split_pieces,
    window_steps,
)
from tests.series_fixtures import clean_series

NAN = math.nan
SERIES = "s1"
NO_GAPS = Cleaning(max_gap="none")


def _row(time: float, *values: float, kind: str = "numeric", text: str | None = None,
         source: str | None = None) -> Row:
    return Row(series_id=SERIES, time=float(time),
               time_text=text if text is not None else f"{time:g}", time_kind=kind,
               values=tuple(float(v) for v in values),
               source=source if source is not None else f"in.csv:t{time:g}")


def _segment(times, values=None) -> Segment:
    """A segment whose single value column defaults to 10 × the time."""
    times = np.asarray(times, np.float64)
    if values is None:
        values = times * 10
    return Segment(times, TimeTexts.stored([f"{t:g}" for t in times]),
                   np.asarray(values, np.float64).reshape(len(times), -1))


def _times(result: CleanSeries) -> list[list[float]]:
    return [s.times.tolist() for s in result.segments]


def _values(result: CleanSeries) -> list[list[list[float]]]:
    return [s.values.tolist() for s in result.segments]


def _summary(result: CleanSeries) -> list[tuple[str, str, str]]:
    return [(r.key, r.source, r.reason) for r in result.rejections]


def _accounted(stats) -> int:
    return (stats["rows_kept"] + stats["rows_rejected"] + stats["rows_dropped_missing"]
            + stats["rows_merged_duplicates"])


# --- Windowing ------------------------------------------------------------------------

GEOMETRIES = list(itertools.product((1, 2, 3, 4), (1, 2, 3), (1, 2, 3), (0, 1, 2, 3)))
LENGTHS = range(0, 17)


def _brute_force_starts(length: int, window_size: int, shift: int, stride: int,
                        horizon: int) -> list[int]:
    """Every start (0, shift, 2·shift, ...) whose last window / target row exists."""
    starts = []
    for start in range(0, length, shift):
        rows = [start + k * stride for k in range(window_size + horizon)]
        if rows[-1] < length:
            starts.append(start)
    return starts


@pytest.mark.parametrize(("window_size", "shift", "stride", "horizon"), GEOMETRIES)
def test_windowing_count_matches_brute_force(window_size, shift, stride, horizon):
    windowing = Windowing(window_size, shift, stride, horizon)
    for length in LENGTHS:
        expected = len(_brute_force_starts(length, window_size, shift, stride, horizon))
        assert windowing.count(length) == expected, length


@pytest.mark.parametrize(("window_size", "shift", "stride", "horizon"), GEOMETRIES)
def test_window_steps_take_every_window_and_its_target(window_size, shift, stride,
                                                       horizon):
    """Rows numbered by their index (two columns: i and -i), taken at every window's
    steps, in an order other than the rows'."""
    windowing = Windowing(window_size, shift, stride, horizon)
    for length in LENGTHS:
        rows = np.stack([np.arange(length), -np.arange(length)], axis=1)
        starts = _brute_force_starts(length, window_size, shift, stride, horizon)[::-1]
        steps = window_steps(rows, np.array(starts, np.int64), windowing)
        assert steps.shape == (len(starts), window_size + horizon, 2)
        assert steps.flags.c_contiguous
        assert steps[..., 0].tolist() == [
            [start + k * stride for k in range(window_size)]
            + [start + (window_size - 1 + k) * stride for k in range(1, horizon + 1)]
            for start in starts], length
        assert (steps[..., 1] == -steps[..., 0]).all()


def test_windowing_span():
    assert Windowing(window_size=3, shift=5, stride=2, horizon=2).span == 9
    assert Windowing(window_size=1, horizon=0).span == 1


def test_windowing_defaults():
    assert Windowing(4) == Windowing(window_size=4, shift=1, stride=1, horizon=1)


@pytest.mark.parametrize("kwargs", [
    {"window_size": 0}, {"window_size": -1}, {"window_size": 2, "shift": 0},
    {"window_size": 2, "stride": 0}, {"window_size": 2, "stride": -2},
    {"window_size": 2, "horizon": -1},
])
def test_windowing_invalid_values_are_value_errors(kwargs):
    with pytest.raises(ValueError, match="window_size, shift, stride >= 1"):
        Windowing(**kwargs)


# --- Cleaning / TimeSplit validation --------------------------------------------------

@pytest.mark.parametrize(("kwargs", "message"), [
    ({"duplicates": "first"}, "--duplicates"),
    ({"duplicates": "drop"}, "--duplicates"),
    ({"missing": "zero"}, "--missing"),
    ({"missing": "mean"}, "--missing"),
    ({"max_gap": "big"}, "--max_gap"),
    ({"max_gap": "Auto"}, "--max_gap"),
    ({"max_gap": 0}, "--max_gap"),
    ({"max_gap": -1.5}, "--max_gap"),
    ({"max_gap": math.nan}, "--max_gap"),
])
def test_cleaning_invalid_values_are_value_errors(kwargs, message):
    with pytest.raises(ValueError, match=message):
        Cleaning(**kwargs)


@pytest.mark.parametrize("kwargs", [
    {}, {"duplicates": "reject", "missing": "interpolate", "max_gap": 0.5},
    {"missing": "ffill", "max_gap": "none"}, {"missing": "reject", "max_gap": 3},
])
def test_cleaning_valid_values_are_kept_as_given(kwargs):
    cleaning = dataclasses.asdict(Cleaning(**kwargs))
    assert {name: cleaning[name] for name in kwargs} == kwargs


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"mode": "random"}, "--split_by"),
    ({"mode": "Time"}, "--split_by"),
    ({"cutoffs": (5.0, 4.0)}, "--split_times"),
])
def test_time_split_invalid_values_are_value_errors(kwargs, message):
    with pytest.raises(ValueError, match=message):
        TimeSplit(**kwargs)


def test_time_split_equal_cutoffs_are_valid():
    assert TimeSplit(cutoffs=(5.0, 5.0)).cutoffs == (5.0, 5.0)


# --- clean_series: order and duplicates -----------------------------------------------

def test_clean_series_sorts_shuffled_rows():
    rows = [_row(3, 30), _row(0, 0), _row(2, 20), _row(1, 10)]
    result = clean_series(SERIES, rows, NO_GAPS)
    assert _times(result) == [[0.0, 1.0, 2.0, 3.0]]
    assert tuple(result.segments[0].texts) == ("0", "1", "2", "3")
    assert _values(result) == [[[0.0], [10.0], [20.0], [30.0]]]
    assert result.rejections == []


def test_clean_series_empty_input():
    result = clean_series(SERIES, [], Cleaning())
    assert (result.segments, result.rejections) == ([], [])
    assert result.stats["rows_read"] == 0
    assert _accounted(result.stats) == 0


@pytest.mark.parametrize(("duplicate_values", "mean"), [
    ((2, 4), 3.0), ((2, 4, 9), 5.0), ((7, 7), 7.0),
])
def test_clean_series_duplicates_mean_averages(duplicate_values, mean):
    rows = [_row(0, 1), *(_row(1, v, source=f"in.csv:{i}")
                          for i, v in enumerate(duplicate_values)), _row(2, 5)]
    result = clean_series(SERIES, rows, Cleaning(duplicates="mean", max_gap="none"))
    assert _times(result) == [[0.0, 1.0, 2.0]]
    assert _values(result) == [[[1.0], [mean], [5.0]]]
    assert result.stats["rows_merged_duplicates"] == len(duplicate_values) - 1
    assert result.stats["rows_kept"] == 3
    assert result.rejections == []


def test_clean_series_duplicates_mean_ignores_missing_values():
    rows = [_row(0, 1, NAN), _row(0, 3, 8), _row(1, 2, 2)]
    result = clean_series(SERIES, rows, Cleaning(duplicates="mean", max_gap="none"))
    assert _values(result) == [[[2.0, 8.0], [2.0, 2.0]]]
    assert result.stats["rows_merged_duplicates"] == 1
    assert result.stats["rows_dropped_missing"] == 0


def test_clean_series_duplicates_reject_rejects_every_row_at_the_timestamp():
    rows = [_row(0, 1), _row(1, 2, source="in.csv:7"), _row(2, 5),
            _row(1, 4, source="in.csv:9"), _row(1, 3, source="in.csv:8")]
    result = clean_series(SERIES, rows, Cleaning(duplicates="reject", max_gap="none"))
    assert _times(result) == [[0.0, 2.0]]
    assert _values(result) == [[[1.0], [5.0]]]
    assert _summary(result) == [
        ("s1@1", "in.csv:7", "duplicate_timestamp"),
        ("s1@1", "in.csv:8", "duplicate_timestamp"),
        ("s1@1", "in.csv:9", "duplicate_timestamp")]
    assert result.stats["rows_rejected"] == 3
    assert result.stats["rows_merged_duplicates"] == 0


def test_clean_series_duplicates_reject_of_every_row_leaves_nothing():
    rows = [_row(4, 1), _row(4, 2)]
    result = clean_series(SERIES, rows, Cleaning(duplicates="reject"))
    assert result.segments == []
    assert [r.reason for r in result.rejections] == ["duplicate_timestamp"] * 2
    assert (result.stats["rows_read"], result.stats["rows_rejected"]) == (2, 2)


# --- clean_series: missing values -----------------------------------------------------

def test_clean_series_missing_drop():
    rows = [_row(t, v) for t, v in enumerate([1, NAN, 3, NAN, 5])]
    result = clean_series(SERIES, rows, Cleaning(missing="drop", max_gap="none"))
    assert _times(result) == [[0.0, 2.0, 4.0]]
    assert _values(result) == [[[1.0], [3.0], [5.0]]]
    assert tuple(result.segments[0].texts) == ("0", "2", "4")
    assert result.stats["rows_dropped_missing"] == 2
    assert result.rejections == []


def test_clean_series_missing_drop_needs_every_column():
    rows = [_row(0, 1, 2), _row(1, NAN, 2), _row(2, 1, NAN), _row(3, 4, 5)]
    result = clean_series(SERIES, rows, Cleaning(missing="drop", max_gap="none"))
    assert _times(result) == [[0.0, 3.0]]
    assert result.stats["rows_dropped_missing"] == 2


def test_clean_series_missing_ffill_copies_the_previous_value():
    rows = [_row(t, v) for t, v in enumerate([1, NAN, NAN, 4, NAN])]
    result = clean_series(SERIES, rows, Cleaning(missing="ffill", max_gap="none"))
    assert _times(result) == [[0.0, 1.0, 2.0, 3.0, 4.0]]
    assert _values(result) == [[[1.0], [1.0], [1.0], [4.0], [4.0]]]
    assert result.stats["values_filled"] == 3
    assert result.stats["rows_dropped_missing"] == 0


def test_clean_series_missing_ffill_drops_leading_missing_rows():
    rows = [_row(t, v) for t, v in enumerate([NAN, NAN, 1, NAN, 5])]
    result = clean_series(SERIES, rows, Cleaning(missing="ffill", max_gap="none"))
    assert _times(result) == [[2.0, 3.0, 4.0]]
    assert _values(result) == [[[1.0], [1.0], [5.0]]]
    assert result.stats["rows_dropped_missing"] == 2
    assert result.rejections == []


@pytest.mark.parametrize(("missing", "values", "filled"), [
    ("ffill", [NAN, NAN, 1, NAN, 5], 1),                # rows 0 and 1 are dropped
    ("interpolate", [NAN, 0, NAN, NAN, 6, NAN], 2),     # rows 0 and 5 are dropped
])
def test_clean_series_values_filled_counts_only_kept_rows(missing, values, filled):
    # A value in a row that is dropped (before the first / after the last valid value)
    # was not filled: it is already counted in rows_dropped_missing.
    rows = [_row(t, v) for t, v in enumerate(values)]
    result = clean_series(SERIES, rows, Cleaning(missing=missing, max_gap="none"))
    assert result.stats["values_filled"] == filled


def test_clean_series_missing_ffill_per_column():
    rows = [_row(0, 1, NAN), _row(1, NAN, NAN), _row(2, 3, 7), _row(3, NAN, NAN),
            _row(4, 5, 9)]
    result = clean_series(SERIES, rows, Cleaning(missing="ffill", max_gap="none"))
    assert _times(result) == [[2.0, 3.0, 4.0]]
    assert _values(result) == [[[3.0, 7.0], [3.0, 7.0], [5.0, 9.0]]]
    assert result.stats["rows_dropped_missing"] == 2


def test_clean_series_missing_interpolate_is_linear_in_time():
    # Valid values at t=1 (0.0) and t=4 (6.0): t=2 is a third of the way, t=3 two thirds.
    rows = [_row(0, NAN), _row(1, 0), _row(2, NAN), _row(3, NAN), _row(4, 6)]
    result = clean_series(SERIES, rows, Cleaning(missing="interpolate", max_gap="none"))
    assert _times(result) == [[1.0, 2.0, 3.0, 4.0]]
    assert _values(result) == [[[0.0], [2.0], [4.0], [6.0]]]


def test_clean_series_missing_interpolate_uses_times_not_row_positions():
    rows = [_row(0, 0), _row(1, NAN), _row(4, 8)]
    result = clean_series(SERIES, rows, Cleaning(missing="interpolate", max_gap="none"))
    assert _values(result) == [[[0.0], [2.0], [8.0]]]


def test_clean_series_missing_interpolate_drops_leading_and_trailing_rows():
    rows = [_row(t, v) for t, v in [(0, NAN), (1, NAN), (2, 10), (3, NAN), (5, 20),
                                    (6, NAN), (7, NAN)]]
    result = clean_series(SERIES, rows, Cleaning(missing="interpolate", max_gap="none"))
    assert _times(result) == [[2.0, 3.0, 5.0]]
    assert np.allclose(result.segments[0].values[:, 0], [10.0, 10.0 + 10.0 / 3, 20.0])
    assert result.stats["rows_dropped_missing"] == 4
    assert result.rejections == []


def test_clean_series_missing_interpolate_column_without_values_drops_every_row():
    rows = [_row(0, 1, NAN), _row(1, 2, NAN)]
    result = clean_series(SERIES, rows, Cleaning(missing="interpolate"))
    assert result.segments == []
    assert result.stats["rows_dropped_missing"] == 2
    assert result.stats["rows_kept"] == 0


def test_clean_series_missing_reject():
    rows = [_row(0, 1), _row(1, NAN), _row(2, 3), _row(3, 4), _row(4, NAN)]
    result = clean_series(SERIES, rows, Cleaning(missing="reject", max_gap="none"))
    assert _times(result) == [[0.0, 2.0, 3.0]]
    assert [(r.key, r.reason) for r in result.rejections] == [
        ("s1@1", "missing_value"), ("s1@4", "missing_value")]
    assert result.stats["rows_rejected"] == 2
    assert result.stats["rows_dropped_missing"] == 0


# --- clean_series: inconsistent timestamps --------------------------------------------

def test_clean_series_mixed_timestamp_kinds_is_one_rejection():
    rows = [_row(5, 1, source="in.csv:3"),
            _row(1704153600, 2, kind="datetime", text="2024-01-02", source="in.csv:2"),
            _row(6, 3, source="in.csv:4")]
    result = clean_series(SERIES, rows, Cleaning())
    assert result.segments == []
    assert _summary(result) == [("s1", "in.csv:3", "inconsistent_timestamps")]
    assert "3 rows" in result.rejections[0].message
    assert result.stats["rows_rejected"] == 3
    assert result.stats["rows_kept"] == 0


# --- clean_series: the accounting invariant -------------------------------------------

MESSY_ROWS = [
    _row(5, 5, 50), _row(0, NAN, 0), _row(1, 1, NAN), _row(2, 2, 20),
    _row(2, 4, 22, source="in.csv:dup1"), _row(3, NAN, NAN), _row(4, 4, 40),
    _row(9, 9, 90), _row(9, NAN, 91, source="in.csv:dup2"), _row(10, 10, NAN),
    _row(7, 7, 70), _row(11, NAN, NAN), _row(7, 7, 70, source="in.csv:dup3"),
]


@pytest.mark.parametrize(("duplicates", "missing"), list(itertools.product(
    ("mean", "reject"), ("drop", "ffill", "interpolate", "reject"))))
@pytest.mark.parametrize("max_gap", ["auto", "none", 1.0])
def test_clean_series_accounts_for_every_row(duplicates, missing, max_gap):
    result = clean_series(SERIES, MESSY_ROWS, Cleaning(duplicates, missing, max_gap))
    stats = result.stats
    assert stats["rows_read"] == len(MESSY_ROWS)
    assert stats["rows_read"] == _accounted(stats)
    assert stats["rows_kept"] == sum(len(s) for s in result.segments)
    assert stats["rows_rejected"] == len(result.rejections)


@pytest.mark.parametrize("rows", [
    [], [_row(1, 1)], [_row(1, NAN)], [_row(1, 1), _row(1, 2)],
    [_row(0, 1), _row(1, 1, kind="datetime")],
])
@pytest.mark.parametrize("cleaning", [
    Cleaning("mean", "drop"), Cleaning("reject", "ffill"), Cleaning("mean", "interpolate"),
    Cleaning("reject", "reject"),
])
def test_clean_series_accounts_for_every_row_in_small_cases(rows, cleaning):
    stats = clean_series(SERIES, rows, cleaning).stats
    assert stats["rows_read"] == len(rows) == _accounted(stats)


def test_clean_series_reject_policies_account_exactly():
    result = clean_series(SERIES, MESSY_ROWS, Cleaning("reject", "reject", "none"))
    # Duplicates at t=2, 7, 9 (6 rows); then NaN rows at t=0, 1, 3, 10, 11 (5 rows).
    stats = result.stats
    assert (stats["rows_read"], stats["rows_rejected"], stats["rows_kept"]) == (13, 11, 2)
    assert (stats["rows_dropped_missing"], stats["rows_merged_duplicates"]) == (0, 0)
    assert _times(result) == [[4.0, 5.0]]


# --- clean_series: gaps ---------------------------------------------------------------

def test_clean_series_gap_auto_splits_beyond_one_and_a_half_median_steps():
    rows = [_row(t, t) for t in (0, 1, 2, 3, 10, 11, 12)]
    result = clean_series(SERIES, rows, Cleaning(max_gap="auto"))
    assert _times(result) == [[0.0, 1.0, 2.0, 3.0], [10.0, 11.0, 12.0]]
    assert tuple(result.segments[1].texts) == ("10", "11", "12")
    assert _values(result)[1] == [[10.0], [11.0], [12.0]]
    assert result.stats["gaps_split"] == 1


def test_clean_series_gap_auto_keeps_exactly_one_and_a_half_median_steps():
    # Steps 2, 2, 3, 2: median 2, limit 3 — a step of exactly 3 is not a gap.
    rows = [_row(t, t) for t in (0, 2, 4, 7, 9)]
    result = clean_series(SERIES, rows, Cleaning(max_gap="auto"))
    assert _times(result) == [[0.0, 2.0, 4.0, 7.0, 9.0]]
    assert result.stats["gaps_split"] == 0


def test_clean_series_gap_auto_uses_the_median_not_the_mean():
    # Steps 1, 1, 2, 1, 20: mean 5, median 1 (limit 1.5) → both 2 and 20 are gaps.
    rows = [_row(t, t) for t in (0, 1, 2, 4, 5, 25)]
    result = clean_series(SERIES, rows, Cleaning(max_gap="auto"))
    assert _times(result) == [[0.0, 1.0, 2.0], [4.0, 5.0], [25.0]]
    assert result.stats["gaps_split"] == 2


def test_clean_series_gap_number():
    rows = [_row(t, t) for t in (0, 1, 3, 6, 8, 8.5)]
    result = clean_series(SERIES, rows, Cleaning(max_gap=2))
    assert _times(result) == [[0.0, 1.0, 3.0], [6.0, 8.0, 8.5]]
    assert result.stats["gaps_split"] == 1


def test_clean_series_gap_none_never_splits():
    rows = [_row(t, t) for t in (0, 1, 100, 101, 10_000)]
    result = clean_series(SERIES, rows, Cleaning(max_gap="none"))
    assert _times(result) == [[0.0, 1.0, 100.0, 101.0, 10_000.0]]
    assert result.stats["gaps_split"] == 0


@pytest.mark.parametrize("max_gap", ["auto", "none", 0.1])
def test_clean_series_single_row_is_one_segment(max_gap):
    result = clean_series(SERIES, [_row(3, 1)], Cleaning(max_gap=max_gap))
    assert _times(result) == [[3.0]]


def test_clean_series_gaps_are_measured_after_dropping_missing_rows():
    rows = [_row(t, NAN if t in (3, 4, 5) else t) for t in range(10)]
    result = clean_series(SERIES, rows, Cleaning(missing="drop", max_gap="auto"))
    assert _times(result) == [[0.0, 1.0, 2.0], [6.0, 7.0, 8.0, 9.0]]


# --- split_pieces ---------------------------------------------------------------------

def _piece_times(pieces: dict[str, list[Segment]]) -> dict[str, list[list[float]]]:
    return {split: [p.times.tolist() for p in ps] for split, ps in pieces.items()}


def _same(got: list[Segment], expected: list[Segment]) -> bool:
    return len(got) == len(expected) and all(a is b for a, b in zip(got, expected, strict=True))


def test_split_pieces_no_segments_gives_empty_splits():
    assert split_pieces(SERIES, [], TimeSplit()) == {
        "train": [], "validation": [], "test": []}


def test_split_pieces_series_mode_puts_the_whole_series_in_its_hashed_split():
    fractions = splits.SplitFractions(0.4, 0.3, 0.3)
    segments = [_segment([0, 1, 2]), _segment([10, 11])]
    seen = set()
    for i in range(40):
        series_id = f"series-{i}"
        expected = splits.assign_split(series_id, fractions)
        seen.add(expected)
        pieces = split_pieces(series_id, segments, TimeSplit("series", fractions))
        assert set(pieces) == {"train", "validation", "test"}
        for split, got in pieces.items():
            assert _same(got, segments if split == expected else [])
    assert seen == {"train", "validation", "test"}


def test_split_pieces_series_mode_ignores_cutoffs():
    fractions = splits.SplitFractions()
    segments = [_segment(range(10))]
    pieces = split_pieces("abc", segments, TimeSplit("series", fractions, (2.0, 5.0)))
    assert _same(pieces[splits.assign_split("abc", fractions)], segments)


@pytest.mark.parametrize(("n", "fractions", "counts"), [
    (10, (0.8, 0.1, 0.1), (8, 1, 1)),
    (7, (0.7, 0.15, 0.15), (5, 1, 1)),      # round(4.9) = 5, round(5.95) = 6
    (20, (0.7, 0.15, 0.15), (14, 3, 3)),
    (9, (0.8, 0.1, 0.1), (7, 1, 1)),        # round(7.2) = 7, round(8.1) = 8
    (5, (0.6, 0.2, 0.2), (3, 1, 1)),
    (3, (0.8, 0.1, 0.1), (2, 1, 0)),        # round(2.4) = 2, round(2.7) = 3
    (1, (0.8, 0.1, 0.1), (1, 0, 0)),        # round(0.8) = 1
    (2, (0.8, 0.1, 0.1), (2, 0, 0)),
    (6, (1.0, 0.0, 0.0), (6, 0, 0)),
    (6, (0.0, 1.0, 0.0), (0, 6, 0)),
    (6, (0.0, 0.0, 1.0), (0, 0, 6)),
    (6, (0.5, 0.0, 0.5), (3, 0, 3)),
])
def test_split_pieces_time_fractions_cut_at_exact_rows(n, fractions, counts):
    times = [float(i * i) for i in range(n)]      # uneven steps: rows, not time, count
    pieces = split_pieces(SERIES, [_segment(times)],
                          TimeSplit("time", splits.SplitFractions(*fractions)))
    n_train, n_validation, _ = counts
    bounds = {"train": (0, n_train), "validation": (n_train, n_train + n_validation),
              "test": (n_train + n_validation, n)}
    for split, (a, b) in bounds.items():
        expected = [times[a:b]] if b > a else []
        assert _piece_times(pieces)[split] == expected, split


def test_split_pieces_time_fractions_count_rows_across_segments():
    segments = [_segment([0, 1, 2, 3, 4, 5]), _segment([10, 11, 12, 13])]
    pieces = split_pieces(SERIES, segments,
                          TimeSplit("time", splits.SplitFractions(0.8, 0.1, 0.1)))
    assert _piece_times(pieces) == {
        "train": [[0.0, 1.0, 2.0, 3.0, 4.0, 5.0], [10.0, 11.0]],
        "validation": [[12.0]],
        "test": [[13.0]],
    }


def test_split_pieces_keep_values_and_texts_with_their_rows():
    segment = _segment([0, 1, 2, 3, 4], [[0, 1], [2, 3], [4, 5], [6, 7], [8, 9]])
    pieces = split_pieces(SERIES, [segment],
                          TimeSplit("time", splits.SplitFractions(0.6, 0.2, 0.2)))
    assert [p.values.tolist() for p in pieces["train"]] == [[[0, 1], [2, 3], [4, 5]]]
    assert [tuple(p.texts) for p in pieces["validation"]] == [("3",)]
    assert [p.values.tolist() for p in pieces["test"]] == [[[8, 9]]]


def test_split_pieces_time_cutoffs():
    segments = [_segment([0, 1, 2, 3]), _segment([6, 7, 8, 9])]
    pieces = split_pieces(SERIES, segments, TimeSplit("time", cutoffs=(2.0, 7.0)))
    assert _piece_times(pieces) == {
        "train": [[0.0, 1.0]],
        "validation": [[2.0, 3.0], [6.0]],
        "test": [[7.0, 8.0, 9.0]],
    }


@pytest.mark.parametrize(("cutoffs", "expected"), [
    ((5.0, 5.0), {"train": [[0.0, 2.0, 4.0]], "validation": [], "test": [[6.0, 8.0]]}),
    ((100.0, 200.0), {"train": [[0.0, 2.0, 4.0, 6.0, 8.0]], "validation": [],
                      "test": []}),
    ((-1.0, 0.0), {"train": [], "validation": [], "test": [[0.0, 2.0, 4.0, 6.0, 8.0]]}),
    ((4.0, 8.0), {"train": [[0.0, 2.0]], "validation": [[4.0, 6.0]], "test": [[8.0]]}),
])
def test_split_pieces_time_cutoff_edges(cutoffs, expected):
    pieces = split_pieces(SERIES, [_segment([0, 2, 4, 6, 8])],
                          TimeSplit("time", cutoffs=cutoffs))
    assert _piece_times(pieces) == expected


SEGMENT_SETS = [
    [_segment(range(10))],
    [_segment([0, 1, 2]), _segment([5, 6, 7, 8]), _segment([20, 21, 22, 23, 24, 25])],
    [_segment([1]), _segment([3, 4]), _segment([9])],
]


@pytest.mark.parametrize("segments", SEGMENT_SETS)
@pytest.mark.parametrize("time_split", [
    TimeSplit("time", splits.SplitFractions(0.8, 0.1, 0.1)),
    TimeSplit("time", splits.SplitFractions(0.5, 0.25, 0.25)),
    TimeSplit("time", splits.SplitFractions(0.34, 0.33, 0.33)),
    TimeSplit("time", cutoffs=(4.0, 7.5)),
    TimeSplit("time", cutoffs=(2.0, 22.0)),
    TimeSplit("series", splits.SplitFractions(0.34, 0.33, 0.33)),
])
def test_split_pieces_no_piece_spans_two_splits(segments, time_split):
    pieces = split_pieces(SERIES, segments, time_split)
    by_split = [np.concatenate([p.times for p in pieces[s]]) if pieces[s] else np.empty(0)
                for s in ("train", "validation", "test")]
    # Splits are consecutive in time, and together hold every row exactly once.
    ordered = np.concatenate(by_split)
    assert ordered.tolist() == np.concatenate([s.times for s in segments]).tolist()
    for earlier, later in itertools.pairwise([t for t in by_split if len(t)]):
        assert earlier.max() < later.min()
    # Every piece is a non-empty run of consecutive rows of a single segment.
    for piece in itertools.chain.from_iterable(pieces.values()):
        assert len(piece) > 0
        homes = [s for s in segments if set(piece.times.tolist()) <= set(s.times.tolist())]
        assert len(homes) == 1
        start = homes[0].times.tolist().index(piece.times[0])
        assert homes[0].times[start:start + len(piece)].tolist() == piece.times.tolist()


def test_clean_series_missing_value_rejection_names_the_input_row():
    rows = [_row(0, 1.0), _row(1, math.nan, source="in.csv:7"), _row(2, 3.0)]
    result = clean_series(SERIES, rows, Cleaning(missing="reject"))
    assert [(r.reason, r.source) for r in result.rejections] == [
        ("missing_value", "in.csv:7")]


def test_merged_duplicates_keep_the_first_rows_categorical_codes():
    from etl.timeseries.rows.time_texts import DATETIME_BIT, TimeTexts
    from etl.timeseries.series import SeriesRows, clean_rows

    # Two rows at t=0 (values 4 and 2: the one with 2 sorts first) and one at t=1;
    # column 1 holds categorical codes.
    rows = SeriesRows(times=np.array([0.0, 0.0, 1.0]),
                      values=np.array([[4.0, 7.0], [2.0, 5.0], [1.0, 9.0]]),
                      positions=np.arange(3, dtype=np.int64),
                      texts=TimeTexts.stored(["0", "0", "1"]), kinds=DATETIME_BIT)
    cleaned = clean_rows("s", rows, Cleaning(), lambda p: str(p), policy_columns=[0],
                         first_columns=[1])
    (segment,) = cleaned.segments
    np.testing.assert_array_equal(segment.values, [[3.0, 5.0], [1.0, 9.0]])
