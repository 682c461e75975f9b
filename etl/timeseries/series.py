"""One series, start to finish: clean → segment at gaps → split → windows. Pure functions.

Every step works on the series' columns (numpy arrays), never row by row. Order of
operations for a series (all deterministic, documented in docs/FORMAT.md):

1. sort rows by timestamp (ties by values, then input position);
2. duplicate timestamps: ``mean`` averages them into one row, ``reject`` dead-letters
   every row at that timestamp;
3. missing values: ``drop`` the row, ``ffill`` from the previous row, ``interpolate``
   linearly in time (rows before the first / after the last valid value are dropped),
   or ``reject`` the row as a dead letter;
4. gaps: consecutive rows further apart than ``max_gap`` start a new segment
   (``auto``: 1.5 × the series' median step; ``none``: never);
5. split (``time``: by per-series fraction of rows or global cut-off times;
   ``series``: the whole series by a hash of its id); every segment is cut at the
   split boundaries, so no window crosses one;
6. windows inside each piece (``tf.data``'s size / shift / stride semantics, plus
   ``horizon`` target steps at the same stride after the window): ``window_steps``.
"""

from __future__ import annotations

import collections
import dataclasses
import itertools
import math
from collections.abc import Callable, Sequence

import numpy as np

from etl.core import dead_letters
from etl.core.dead_letters import Rejection
from etl.core.shards import splits
from etl.timeseries.rows.time_texts import DATETIME_BIT, NUMERIC_BIT, TimeTexts
from reader.format import contract

DUPLICATE_POLICIES = ("mean", "reject")
MISSING_POLICIES = ("drop", "ffill", "interpolate", "reject")
SPLIT_MODES = ("time", "series")


@dataclasses.dataclass(frozen=True)
class Windowing:
    """Window geometry in rows: ``window_size`` rows taken every ``stride`` rows,
    starting every ``shift`` rows, followed by ``horizon`` target rows (same stride)."""

    window_size: int
    shift: int = 1
    stride: int = 1
    horizon: int = 1

    def __post_init__(self) -> None:
        if self.window_size < 1 or self.shift < 1 or self.stride < 1 or self.horizon < 0:
            raise ValueError(
                f"Need window_size, shift, stride >= 1 and horizon >= 0; got "
                f"{self.window_size}, {self.shift}, {self.stride}, {self.horizon}.")

    @property
    def span(self) -> int:
        """Rows one window plus its target covers."""
        return (self.window_size - 1) * self.stride + 1 + self.horizon * self.stride

    def count(self, length: int) -> int:
        """Windows in a piece of ``length`` rows: ``floor((L - span) / shift) + 1``."""
        return 0 if length < self.span else (length - self.span) // self.shift + 1


@dataclasses.dataclass(frozen=True)
class Cleaning:
    """Duplicate, missing-value and gap policies."""

    duplicates: str = "mean"
    missing: str = "drop"
    max_gap: float | str = "auto"  # a number (timestamp units), "auto" or "none"

    def __post_init__(self) -> None:
        if self.duplicates not in DUPLICATE_POLICIES:
            raise ValueError(f"--duplicates must be one of {DUPLICATE_POLICIES}.")
        if self.missing not in MISSING_POLICIES:
            raise ValueError(f"--missing must be one of {MISSING_POLICIES}.")
        if isinstance(self.max_gap, str) and self.max_gap not in ("auto", "none"):
            raise ValueError(f"--max_gap must be a number, 'auto' or 'none', got "
                             f"{self.max_gap!r}.")
        if not isinstance(self.max_gap, str) and not self.max_gap > 0:
            raise ValueError(f"--max_gap must be > 0, got {self.max_gap}.")


@dataclasses.dataclass(frozen=True)
class TimeSplit:
    """How rows are assigned to splits (see the module docstring)."""

    mode: str = "time"
    fractions: splits.SplitFractions = dataclasses.field(
        default_factory=lambda: splits.SplitFractions(0.7, 0.15, 0.15))
    cutoffs: tuple[float, float] | None = None  # (validation start, test start)
    # The cut-offs as --split_times gave them (ISO 8601 or numbers), for the manifest.
    cutoff_texts: tuple[str, str] | None = None

    def __post_init__(self) -> None:
        if self.mode not in SPLIT_MODES:
            raise ValueError(f"--split_by must be one of {SPLIT_MODES}.")
        if self.cutoffs is not None and not self.cutoffs[0] <= self.cutoffs[1]:
            raise ValueError(f"--split_times must be increasing, got {self.cutoffs}.")


@dataclasses.dataclass(frozen=True)
class SeriesRows:
    """One series' parsed rows as columns, in any order.

    ``positions`` order the rows as the input does (file, then line); ``kinds`` is
    the OR of the rows' timestamp kinds (``NUMERIC_BIT``, ``DATETIME_BIT``).
    """

    times: np.ndarray  # float64 [n]
    values: np.ndarray  # float64 [n, F], NaN = missing
    positions: np.ndarray  # int64 [n]
    texts: TimeTexts
    kinds: int

    def __len__(self) -> int:
        return len(self.times)

    def take(self, index: np.ndarray, values: np.ndarray | None = None) -> SeriesRows:
        """Rows ``index`` (an integer array), with ``values`` in place of theirs."""
        return SeriesRows(times=self.times[index],
                          values=self.values[index] if values is None else values,
                          positions=self.positions[index], texts=self.texts.take(index),
                          kinds=self.kinds)


@dataclasses.dataclass(frozen=True)
class Segment:
    """Consecutive clean rows of one series: times, their texts, values [L, F]."""

    times: np.ndarray
    texts: TimeTexts
    values: np.ndarray

    def __len__(self) -> int:
        return len(self.times)

    def rows(self, mask: np.ndarray) -> Segment:
        index = np.flatnonzero(mask)
        return Segment(self.times[index], self.texts.take(index), self.values[index])


@dataclasses.dataclass
class CleanSeries:
    """Result of cleaning one series."""

    segments: list[Segment]
    rejections: list[Rejection]
    stats: collections.Counter


# The source text ("<file>:<line>") of an input position.
SourceOf = Callable[[int], str]


def _sort_order(rows: SeriesRows) -> np.ndarray:
    """Total order: timestamp, then values (per column: NaN last), then position."""
    by_position = np.argsort(rows.positions, kind="stable")
    if np.all(np.diff(rows.times[by_position]) > 0):
        return by_position  # Input order is time order, no ties: the usual case.
    keys: list[np.ndarray] = [rows.positions]
    for f in reversed(range(rows.values.shape[1])):
        column = rows.values[:, f]
        missing = np.isnan(column)
        keys += [np.where(missing, 0.0, column), missing]
    keys.append(rows.times)
    return np.lexsort(keys)


def _group_means(values: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """NaN-aware mean of each run of rows starting at ``starts`` (a column with no
    value in the run stays NaN)."""
    missing = np.isnan(values)
    sums = np.add.reduceat(np.where(missing, 0.0, values), starts, axis=0)
    counts = np.add.reduceat((~missing).astype(np.int64), starts, axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        return sums / counts


def _fill_missing(times: np.ndarray, values: np.ndarray, policy: str,
                  columns: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
    """Returns (filled values, mask of rows to keep) for ``ffill`` / ``interpolate``
    of ``columns``."""
    keep = np.ones(len(times), bool)
    filled = values.copy()
    for f in columns:
        column = values[:, f]
        valid = ~np.isnan(column)
        if not valid.any():
            keep[:] = False
            continue
        first, last = np.flatnonzero(valid)[[0, -1]]
        keep[:first] = False
        if policy == "ffill":
            index = np.where(valid, np.arange(len(column)), 0)
            np.maximum.accumulate(index, out=index)
            filled[:, f] = column[index]
        else:  # interpolate, inside the valid range only
            keep[last + 1:] = False
            filled[:, f] = np.interp(times, times[valid], column[valid])
    return filled, keep


def _segments(times: np.ndarray, texts: TimeTexts, values: np.ndarray,
              max_gap: float | str, stats: collections.Counter) -> list[Segment]:
    if len(times) == 0:
        return []
    steps = np.diff(times)
    if max_gap == "none" or len(steps) == 0:
        limit = math.inf
    elif max_gap == "auto":
        limit = 1.5 * float(np.median(steps))
    else:
        limit = float(max_gap)
    cuts = np.flatnonzero(steps > limit) + 1
    stats["gaps_split"] += len(cuts)
    bounds = [0, *cuts.tolist(), len(times)]
    return [Segment(times[a:b], texts.take(np.arange(a, b)), values[a:b])
            for a, b in itertools.pairwise(bounds)]


def _row_rejections(series_id: str, texts: TimeTexts, positions: np.ndarray,
                    source_of: SourceOf, rows: np.ndarray, reason: str,
                    messages: Sequence[str]) -> list[Rejection]:
    """One ``Rejection`` per sorted row index in ``rows``, keyed ``<series>@<time text>``."""
    return [Rejection(key=f"{series_id}@{text}", source=source_of(int(positions[row])),
                      reason=reason, message=message)
            for row, text, message in zip(rows.tolist(), texts.take(rows).strings(),
                                          messages, strict=True)]


def _merge_duplicates(series_id: str, rows: SeriesRows, policy: str, source_of: SourceOf,
                      stats: collections.Counter, first_columns: Sequence[int] = ()
                      ) -> tuple[SeriesRows, list[Rejection]]:
    """Step 2 on time-sorted rows: each group of equal times merged (``mean``; the
    ``first_columns``, categorical codes, take the group's first row's value) or
    every row of it rejected (``reject``)."""
    starts = np.flatnonzero(np.concatenate([[True], np.diff(rows.times) != 0]))
    if len(starts) == len(rows):
        return rows, []
    sizes = np.diff(np.concatenate([starts, [len(rows)]]))
    if policy == "mean":
        stats["rows_merged_duplicates"] += int((sizes - 1).sum())
        merged = _group_means(rows.values, starts)
        first = list(first_columns)
        merged[:, first] = rows.values[starts][:, first]
        return rows.take(starts, values=merged), []
    group_size = np.repeat(sizes, sizes)
    duplicated_rows = np.flatnonzero(group_size > 1)
    rejections = _row_rejections(
        series_id, rows.texts, rows.positions, source_of, duplicated_rows,
        dead_letters.DUPLICATE_TIMESTAMP,
        [f"{size} rows share this timestamp." for size in group_size[duplicated_rows].tolist()])
    stats["rows_rejected"] += len(duplicated_rows)
    return rows.take(starts[sizes == 1]), rejections


def _apply_missing_policy(series_id: str, rows: SeriesRows, policy: str, source_of: SourceOf,
                          stats: collections.Counter, columns: Sequence[int]
                          ) -> tuple[SeriesRows, list[Rejection]]:
    """Step 3 on time-sorted rows with distinct times: rows with a missing value in
    ``columns`` dropped, rejected, or filled (rows that cannot be filled are dropped)."""
    missing = np.isnan(rows.values[:, list(columns)]).any(axis=1)
    if not missing.any():
        return rows, []
    rejections: list[Rejection] = []
    if policy in ("drop", "reject"):
        if policy == "reject":
            missing_rows = np.flatnonzero(missing)
            rejections = _row_rejections(
                series_id, rows.texts, rows.positions, source_of, missing_rows,
                dead_letters.MISSING_VALUE,
                ["Row has a missing value (--missing=reject)."] * len(missing_rows))
            stats["rows_rejected"] += int(missing.sum())
        else:
            stats["rows_dropped_missing"] += int(missing.sum())
        return rows.take(np.flatnonzero(~missing)), rejections
    values, keep = _fill_missing(rows.times, rows.values, policy, columns)
    stats["values_filled"] += int(np.isnan(rows.values[:, list(columns)])[keep].sum())
    stats["rows_dropped_missing"] += int((~keep).sum())
    index = np.flatnonzero(keep)
    return rows.take(index, values=values[index]), rejections


def clean_rows(series_id: str, rows: SeriesRows, cleaning: Cleaning,
               source_of: SourceOf, policy_columns: Sequence[int] | None = None,
               first_columns: Sequence[int] = ()) -> CleanSeries:
    """Steps 1-4 of the module docstring for one series' columns.

    ``source_of(position)`` names an input row in dead letters; the missing-value
    policy looks at ``policy_columns`` (default: every column; a known covariate's
    gaps are not filled, ``etl/timeseries/covariates.py``); duplicates merged by
    ``mean`` keep their first row's ``first_columns`` (categorical codes: rows sort
    by time, then values, then input position).
    """
    stats: collections.Counter = collections.Counter()
    stats["rows_read"] += len(rows)
    if not len(rows):
        return CleanSeries([], [], stats)
    rows = rows.take(_sort_order(rows))
    if rows.kinds == NUMERIC_BIT | DATETIME_BIT:
        stats["rows_rejected"] += len(rows)
        return CleanSeries([], [Rejection(
            key=series_id, source=source_of(int(rows.positions[0])),
            reason=dead_letters.INCONSISTENT_TIMESTAMPS,
            message=f"Series mixes numeric and date/time timestamps ({len(rows)} rows).")],
            stats)
    rows, rejections = _merge_duplicates(series_id, rows, cleaning.duplicates, source_of,
                                         stats, first_columns)
    if not len(rows):
        return CleanSeries([], rejections, stats)
    columns = range(rows.values.shape[1]) if policy_columns is None else policy_columns
    rows, missing_rejections = _apply_missing_policy(series_id, rows, cleaning.missing,
                                                     source_of, stats, columns)
    stats["rows_kept"] += len(rows)
    return CleanSeries(_segments(rows.times, rows.texts, rows.values, cleaning.max_gap, stats),
                       rejections + missing_rejections, stats)


def split_pieces(series_id: str, segments: Sequence[Segment], time_split: TimeSplit
                 ) -> dict[str, list[Segment]]:
    """Step 5: each split's pieces of the series (segments cut at split boundaries)."""
    pieces: dict[str, list[Segment]] = {split: [] for split in contract.SPLITS}
    if not segments:
        return pieces
    if time_split.mode == "series":
        pieces[splits.assign_split(series_id, time_split.fractions)] = list(segments)
        return pieces
    if time_split.cutoffs is not None:
        cut_validation, cut_test = time_split.cutoffs
    else:
        times = np.concatenate([s.times for s in segments])
        n = len(times)
        f = time_split.fractions
        first_validation = min(n, round(n * f.train))
        first_test = min(n, max(first_validation, round(n * (f.train + f.validation))))
        cut_validation = times[first_validation] if first_validation < n else math.inf
        cut_test = times[first_test] if first_test < n else math.inf
    for segment in segments:
        for split, mask in (
            (contract.TRAIN, segment.times < cut_validation),
            (contract.VALIDATION, (segment.times >= cut_validation)
             & (segment.times < cut_test)),
            (contract.TEST, segment.times >= cut_test),
        ):
            if mask.any():
                pieces[split].append(segment.rows(mask))
    return pieces


def window_steps(rows: np.ndarray, first: np.ndarray, windowing: Windowing) -> np.ndarray:
    """``rows`` ``[N, F]`` at the steps of the windows starting at rows ``first``
    ``[n]``: ``[n, W + H, F]``, window ``i``'s ``W`` window then ``H`` target rows,
    ``stride`` apart from row ``first[i]``.

    One gather from a sliding view of ``rows`` (a view: no copy until the gather,
    which copies each window's span): an index array of every step of every window
    cost 5 times as much (4.7-5.6 against 1.0 ms for 8,192 windows of 192 steps,
    measured once, 2026-12-06)."""
    if not len(first):
        return np.zeros((0, windowing.window_size + windowing.horizon, rows.shape[1]),
                        rows.dtype)
    # [N - span + 1, F, span]
    spans = np.lib.stride_tricks.sliding_window_view(rows, windowing.span, axis=0)[first]
    return np.ascontiguousarray(spans.transpose(0, 2, 1)[:, ::windowing.stride])
