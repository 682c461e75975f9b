"""Column roles: the per-series checks and the cut at a missing known covariate."""

import collections

import numpy as np
import pytest

from etl.timeseries import covariates
from etl.timeseries.roles import ColumnRoles
from etl.timeseries.rows.time_texts import DATETIME_BIT, NUMERIC_BIT, TimeTexts
from etl.timeseries.series import Segment, SeriesRows, Windowing

ROLES = ColumnRoles(targets=("y",), known=("k",), static_real=("s",),
                    target_transform="log1p", given=True)


def _rows(values, kinds=DATETIME_BIT) -> SeriesRows:
    values = np.asarray(values, np.float64)
    n = len(values)
    return SeriesRows(times=np.arange(n, dtype=np.float64) * 86400, values=values,
                      positions=np.arange(n, dtype=np.int64),
                      texts=TimeTexts.stored([f"t{i}" for i in range(n)]), kinds=kinds)


def _check(rows, roles=ROLES):
    stats = collections.Counter()
    checked, rejections = covariates.check_series("s1", rows, roles, lambda p: f"f:{p}",
                                                  stats)
    return checked, rejections, stats


def test_a_static_given_on_some_rows_fills_the_others():
    checked, rejections, stats = _check(_rows([[1, 0, np.nan], [2, 0, 7.0], [3, 0, np.nan]]))
    assert rejections == [] and not stats
    np.testing.assert_array_equal(checked.values[:, 2], [7.0, 7.0, 7.0])


@pytest.mark.parametrize("statics, reason", [([7.0, 8.0, 7.0], "static_varies"),
                                             ([np.nan] * 3, "missing_static")])
def test_a_varying_or_absent_static_rejects_the_series(statics, reason):
    values = [[1, 0, s] for s in statics]
    checked, rejections, stats = _check(_rows(values))
    assert checked is None
    assert [(r.key, r.reason) for r in rejections] == [("s1", reason)]
    assert stats == {"rows_read": 3, "rows_rejected": 3}


def test_a_negative_target_under_log1p_rejects_its_row_only():
    checked, rejections, stats = _check(_rows([[1, 0, 5], [-0.5, 0, 5], [0, 0, 5]]))
    assert [(r.key, r.reason, r.source) for r in rejections] == [
        ("s1@t1", "negative_under_log1p", "f:1")]
    assert checked.values[:, 0].tolist() == [1, 0]
    assert stats == {"rows_read": 1, "rows_rejected": 1}


def test_calendar_features_need_dates():
    roles = ColumnRoles(targets=("y",), calendar=("month",), given=True)
    checked, rejections, _ = _check(_rows([[1.0], [2.0]], kinds=NUMERIC_BIT), roles)
    assert checked is None and rejections[0].reason == "calendar_needs_dates"


def test_a_missing_known_value_cuts_the_piece_and_counts_the_lost_windows():
    windowing = Windowing(window_size=3, shift=1, horizon=1)  # span 4
    values = np.zeros((12, 3))
    values[5, 1] = np.nan
    piece = Segment(np.arange(12.0), TimeTexts.stored([str(i) for i in range(12)]), values)
    stats = collections.Counter()
    parts = covariates.cut_at_missing_known(piece, ROLES, windowing, stats)
    assert [p.times.tolist() for p in parts] == [[0, 1, 2, 3, 4], list(range(6, 12))]
    # 9 windows over 12 rows; 2 + 3 without row 5.
    assert stats == {"rows_missing_known": 1, "windows_missing_known": 4}


CATEGORY_ROLES = ColumnRoles(targets=("y",), known_categorical=("event",),
                             static_categorical=("store",), given=True)
# The texts the rows' codes index (codes 0..3).
CATEGORIES = ["", "a", "b", "s1"]


@pytest.mark.parametrize("stores, expected", [([0, 3, 0], 3), ([0, 0, 0], 0)])
def test_a_static_categorical_fills_its_empty_cells_or_stays_empty(stores, expected):
    rows = _rows([[1, 1, s] for s in stores])
    stats = collections.Counter()
    checked, rejections = covariates.check_series("s1", rows, CATEGORY_ROLES,
                                                  lambda p: f"f:{p}", stats, CATEGORIES)
    assert rejections == [] and not stats
    np.testing.assert_array_equal(checked.values[:, 2], [expected] * 3)
    np.testing.assert_array_equal(checked.values[:, 1], [1, 1, 1])  # known: as given


def test_a_varying_static_categorical_rejects_the_series_naming_both_texts():
    stats = collections.Counter()
    checked, rejections = covariates.check_series(
        "s1", _rows([[1, 0, 1], [2, 0, 2], [3, 0, 0]]), CATEGORY_ROLES, lambda p: f"f:{p}",
        stats, CATEGORIES)
    assert checked is None and [r.reason for r in rejections] == ["static_varies"]
    assert "'a' and 'b'" in rejections[0].message
    assert stats == {"rows_read": 3, "rows_rejected": 3}
