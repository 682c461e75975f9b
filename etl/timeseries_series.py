"""One series, start to finish: clean → segment at gaps → split → windows. Pure functions.

Order of operations for a series (all deterministic, documented in docs/FORMAT.md):

1. sort rows by timestamp (ties by values, then source position);
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
   ``horizon`` target steps at the same stride after the window).
"""

from __future__ import annotations

import collections
import dataclasses
import itertools
import math
import warnings
from collections.abc import Iterable, Iterator, Sequence

import numpy as np

from etl import dead_letters, splits
from etl.dead_letters import Rejection
from etl.timeseries_sources import Row
from reader import contract

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

    def __post_init__(self) -> None:
        if self.mode not in SPLIT_MODES:
            raise ValueError(f"--split_by must be one of {SPLIT_MODES}.")
        if self.cutoffs is not None and not self.cutoffs[0] <= self.cutoffs[1]:
            raise ValueError(f"--split_times must be increasing, got {self.cutoffs}.")


@dataclasses.dataclass(frozen=True)
class Segment:
    """Consecutive clean rows of one series: times, their texts, values [L, F]."""

    times: np.ndarray
    texts: tuple[str, ...]
    values: np.ndarray

    def __len__(self) -> int:
        return len(self.times)

    def rows(self, mask: np.ndarray) -> Segment:
        index = np.flatnonzero(mask)
        return Segment(self.times[index], tuple(self.texts[i] for i in index),
                       self.values[index])


@dataclasses.dataclass
class CleanSeries:
    """Result of cleaning one series."""

    segments: list[Segment]
    rejections: list[Rejection]
    stats: collections.Counter


def _reject(series_id: str, row: Row, reason: str, message: str) -> Rejection:
    return Rejection(key=f"{series_id}@{row.time_text}", source=row.source, reason=reason,
                     message=message)


def _sort_key(row: Row) -> tuple:
    # NaN-safe, total order: timestamp, then values (NaN last), then source position.
    return (row.time, tuple((math.isnan(v), 0.0 if math.isnan(v) else v)
                            for v in row.values), row.source)


def _merge_duplicates(series_id: str, rows: list[Row], policy: str,
                      stats: collections.Counter, rejections: list[Rejection]
                      ) -> list[tuple[float, str, np.ndarray, str]]:
    merged: list[tuple[float, str, np.ndarray, str]] = []
    i = 0
    while i < len(rows):
        j = i
        while j + 1 < len(rows) and rows[j + 1].time == rows[i].time:
            j += 1
        group = rows[i:j + 1]
        if len(group) == 1:
            merged.append((group[0].time, group[0].time_text,
                           np.array(group[0].values, np.float64), group[0].source))
        elif policy == "mean":
            values = np.array([r.values for r in group], np.float64)
            with warnings.catch_warnings():  # An all-NaN column stays NaN, quietly.
                warnings.simplefilter("ignore", RuntimeWarning)
                mean = np.nanmean(values, axis=0)
            merged.append((group[0].time, group[0].time_text, mean, group[0].source))
            stats["rows_merged_duplicates"] += len(group) - 1
        else:
            for row in group:
                rejections.append(_reject(series_id, row, dead_letters.DUPLICATE_TIMESTAMP,
                                          f"{len(group)} rows share this timestamp."))
            stats["rows_rejected"] += len(group)
        i = j + 1
    return merged


def _fill_missing(times: np.ndarray, values: np.ndarray, policy: str
                  ) -> tuple[np.ndarray, np.ndarray]:
    """Returns (filled values, mask of rows to keep) for ``ffill`` / ``interpolate``."""
    keep = np.ones(len(times), bool)
    filled = values.copy()
    for f in range(values.shape[1]):
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


def _segments(times: np.ndarray, texts: tuple[str, ...], values: np.ndarray,
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
    return [Segment(times[a:b], texts[a:b], values[a:b])
            for a, b in itertools.pairwise(bounds)]


def clean_series(series_id: str, rows: Iterable[Row], cleaning: Cleaning) -> CleanSeries:
    """Steps 1-4 of the module docstring for one series."""
    stats: collections.Counter = collections.Counter()
    rejections: list[Rejection] = []
    ordered = sorted(rows, key=_sort_key)
    stats["rows_read"] += len(ordered)
    kinds = {row.time_kind for row in ordered}
    if len(kinds) > 1:
        rejections.append(Rejection(
            key=series_id, source=ordered[0].source,
            reason=dead_letters.INCONSISTENT_TIMESTAMPS,
            message=f"Series mixes numeric and date/time timestamps ({len(ordered)} rows)."))
        stats["rows_rejected"] += len(ordered)
        return CleanSeries([], rejections, stats)
    merged = _merge_duplicates(series_id, ordered, cleaning.duplicates, stats, rejections)
    if not merged:
        return CleanSeries([], rejections, stats)
    times = np.array([m[0] for m in merged], np.float64)
    texts = tuple(m[1] for m in merged)
    values = np.stack([m[2] for m in merged])
    missing = np.isnan(values).any(axis=1)
    if missing.any():
        if cleaning.missing in ("drop", "reject"):
            if cleaning.missing == "reject":
                for i in np.flatnonzero(missing):
                    rejections.append(Rejection(
                        key=f"{series_id}@{texts[i]}", source=merged[i][3],
                        reason=dead_letters.MISSING_VALUE,
                        message="Row has a missing value (--missing=reject)."))
                stats["rows_rejected"] += int(missing.sum())
            else:
                stats["rows_dropped_missing"] += int(missing.sum())
            keep = ~missing
        else:
            was_missing = np.isnan(values)
            values, keep = _fill_missing(times, values, cleaning.missing)
            stats["values_filled"] += int(was_missing[keep].sum())
            stats["rows_dropped_missing"] += int((~keep).sum())
        index = np.flatnonzero(keep)
        times, texts, values = times[index], tuple(texts[i] for i in index), values[index]
    stats["rows_kept"] += len(times)
    return CleanSeries(_segments(times, texts, values, cleaning.max_gap, stats),
                       rejections, stats)


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


def windows(piece: Segment, windowing: Windowing
            ) -> Iterator[tuple[int, np.ndarray, np.ndarray]]:
    """Step 6: ``(start row, window [W, F], target [H, F])`` for every window."""
    w, s = windowing.window_size, windowing.stride
    for start in range(0, windowing.count(len(piece)) * windowing.shift, windowing.shift):
        last = start + (w - 1) * s
        window = piece.values[start:last + 1:s]
        target = piece.values[last + s:last + s * windowing.horizon + 1:s]
        yield start, window, target


def tiles(piece: Segment, window_size: int) -> Iterator[tuple[int, np.ndarray]]:
    """Non-overlapping ``window_size``-row blocks: every row once (the normaliser's
    statistics are per row, not weighted by how many windows overlap a row)."""
    for start in range(0, len(piece) - window_size + 1, window_size):
        yield start, piece.values[start:start + window_size]
