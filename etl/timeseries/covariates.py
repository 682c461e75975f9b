"""What column roles ask of one series, before and after it is cleaned. Pure functions.

Before cleaning (``check_series``), on the series' raw rows:

* every static real must have one value in the series (rows may leave it empty); a
  series where it varies is a dead letter (``static_varies``), one where no row has it
  too (``missing_static``); empty cells take the series' value;
* every static categorical too, but a series none of whose rows gives it keeps the
  category ``""`` (empty), as any categorical's empty cells do;
* with ``--calendar_features`` the timestamps must be dates (``calendar_needs_dates``);
* with ``--target_transform=log1p`` a row with a negative target is a dead letter
  (``negative_under_log1p``): ``log1p`` of it is undefined below -1 and means
  nothing a count or an amount can be between -1 and 0.

After splitting (``cut_at_missing_known``): a row whose known covariate is missing
cuts its piece in two, so no window or horizon includes it; the windows that would
have included it are counted (``windows_missing_known``), never filled.
"""

from __future__ import annotations

import collections
import itertools
from collections.abc import Callable, Sequence

import numpy as np

from etl.core import dead_letters
from etl.core.dead_letters import Rejection
from etl.timeseries.roles import ColumnRoles
from etl.timeseries.rows.time_texts import NUMERIC_BIT
from etl.timeseries.series import Segment, SeriesRows, Windowing


def _series_rejection(series_id: str, source: str, reason: str, message: str,
                      rows: int, stats: collections.Counter) -> list[Rejection]:
    stats.update(rows_read=rows, rows_rejected=rows)
    return [Rejection(key=series_id, source=source, reason=reason, message=message)]


def _static_varies(series_id: str, source: str, name: str, values: Sequence[str],
                   rows: int, stats: collections.Counter) -> list[Rejection]:
    """The dead letter of a series whose static column ``name`` takes ``values``."""
    return _series_rejection(
        series_id, source, dead_letters.STATIC_VARIES,
        f"The static column {name!r} takes {len(values)} values in this series (e.g. "
        f"{values[0]} and {values[1]}); a static column has one value per series "
        f"({rows} rows).", rows, stats)


def _static_values(series_id: str, rows: SeriesRows, roles: ColumnRoles, source: str,
                   stats: collections.Counter) -> tuple[SeriesRows | None, list[Rejection]]:
    """Rows with each static real filled with the series' one value."""
    columns = range(len(roles.reals))[roles.static_slice]
    values = rows.values.copy()
    for name, column in zip(roles.static_real, columns, strict=True):
        given = values[:, column][~np.isnan(values[:, column])]
        distinct = np.unique(given)
        if len(distinct) == 0:
            return None, _series_rejection(
                series_id, source, dead_letters.MISSING_STATIC,
                f"No row gives the static column {name!r} ({len(rows)} rows).",
                len(rows), stats)
        if len(distinct) > 1:
            return None, _static_varies(series_id, source, name,
                                        [f"{v:g}" for v in distinct.tolist()], len(rows),
                                        stats)
        values[:, column] = distinct[0]
    return rows.take(np.arange(len(rows)), values=values), []


def _static_categories(series_id: str, rows: SeriesRows, roles: ColumnRoles,
                       categories: Sequence[str], source: str, stats: collections.Counter
                       ) -> tuple[SeriesRows | None, list[Rejection]]:
    """Rows with each static categorical's empty cells given the series' one value."""
    values = rows.values.copy()
    for name, column in zip(roles.static_categorical, roles.static_cat_columns,
                            strict=True):
        codes = np.unique(values[:, column]).astype(np.int64).tolist()
        given = [c for c in codes if categories[c]]
        if len(given) > 1:
            return None, _static_varies(series_id, source, name,
                                        [repr(categories[c]) for c in given], len(rows),
                                        stats)
        if given:
            values[:, column] = given[0]
    return rows.take(np.arange(len(rows)), values=values), []


def check_series(series_id: str, rows: SeriesRows, roles: ColumnRoles,
                 source_of: Callable[[int], str], stats: collections.Counter,
                 categories: Sequence[str] = ()
                 ) -> tuple[SeriesRows | None, list[Rejection]]:
    """The series' rows as the roles need them, or None if the whole series is a
    dead letter (its rows then counted read and rejected in ``stats``); rows
    rejected on their own are left out and counted read and rejected.
    ``categories``: the texts the rows' categorical codes index."""
    source = source_of(int(rows.positions.min()))
    if roles.calendar and rows.kinds & NUMERIC_BIT:
        return None, _series_rejection(
            series_id, source, dead_letters.CALENDAR_NEEDS_DATES,
            f"--calendar_features needs date/time timestamps; this series has numeric "
            f"ones ({len(rows)} rows).", len(rows), stats)
    if roles.static_real:
        filled, rejections = _static_values(series_id, rows, roles, source, stats)
        if filled is None:
            return None, rejections
        rows = filled
    if roles.static_categorical:
        filled, rejections = _static_categories(series_id, rows, roles, categories,
                                                source, stats)
        if filled is None:
            return None, rejections
        rows = filled
    if roles.target_transform != "log1p":
        return rows, []
    negative = (rows.values[:, :len(roles.targets)] < 0).any(axis=1)
    if not negative.any():
        return rows, []
    bad = np.flatnonzero(negative)
    rejections = [Rejection(
        key=f"{series_id}@{text}", source=source_of(int(position)),
        reason=dead_letters.NEGATIVE_UNDER_LOG1P,
        message="A target is negative; --target_transform=log1p takes values >= 0.")
        for position, text in zip(rows.positions[bad].tolist(),
                                  rows.texts.take(bad).strings(), strict=True)]
    stats.update(rows_read=len(bad), rows_rejected=len(bad))
    return rows.take(np.flatnonzero(~negative)), rejections


def cut_at_missing_known(piece: Segment, roles: ColumnRoles, windowing: Windowing,
                         stats: collections.Counter) -> list[Segment]:
    """``piece`` cut at every row missing a known covariate (those rows left out);
    counts ``rows_missing_known`` and ``windows_missing_known``."""
    if not roles.known:
        return [piece]
    missing = np.isnan(piece.values[:, roles.known_slice]).any(axis=1)
    if not missing.any():
        return [piece]
    bounds = [-1, *np.flatnonzero(missing).tolist(), len(piece)]
    parts = [piece.rows(_range_mask(len(piece), a + 1, b))
             for a, b in itertools.pairwise(bounds) if b > a + 1]
    stats["rows_missing_known"] += int(missing.sum())
    # Like a gap, a cut restarts the windows after it (every ``shift`` rows from there).
    stats["windows_missing_known"] += max(0, windowing.count(len(piece)) - sum(
        windowing.count(len(p)) for p in parts))
    return parts


def _range_mask(length: int, start: int, stop: int) -> np.ndarray:
    mask = np.zeros(length, bool)
    mask[start:stop] = True
    return mask
