"""Statistics of the rows and series the series step keeps, per split, a bucket at a time.

The series step hands every series it keeps (one with at least one window) to the
bucket's :class:`BucketStatistics`, which fills two ``SplitStatistics``
(``etl.core.stats.features``) per split, emitted once per bucket and merged per split
by ``etl.core.stats.step.WriteStatistics``:

* ``ROWS``, one example per row of the split's pieces (the rows the split keeps:
  cleaned, so duplicates merged, missing values filled or their rows dropped, rows
  missing a known covariate cut out), in the input's units, before any transform or
  normalisation: a FLOAT feature per real column and a STRING feature per
  categorical column (its text; an empty cell is missing), each named as the input
  names the column, in the order rows hold them (``ColumnRoles.reals``, then
  ``categoricals``), and with labels the series' ``label`` (STRING);
* ``SERIES``, one example per series with rows in the split, all INT but ``label``:
  ``length``: its rows in the split (as ``ROWS`` counts them);
  ``pieces``: the runs of consecutive rows they form (cut at time gaps, at the
  split's boundaries and at rows missing a known covariate): each piece's windows
  are cut on their own;
  ``gaps``: time gaps in the split, i.e. steps between consecutive clean rows longer
  than ``--max_gap`` (the manifest's ``gaps_split``; a row dropped for a missing
  value can leave one) whose later row is in the split;
  ``missing``: empty cells (NaN reals, empty categorical texts) of the series' rows
  as parsed, before any is filled, dropped or rejected, each row's counted in the
  split whose time range holds its timestamp: the last split whose first clean row
  is at or before it (the first split with rows for a row before them all). With
  ``--split_times`` a dropped row between a cut-off and the next split's first clean
  row counts in the earlier split; with ``--split_by=series`` every row counts in
  the series' split;
  ``label`` (with labels): the series' label.

Rows are added in blocks of at least ``FLUSH_ROWS`` rows of many series (whole
columns, never a row at a time), so the statistics cost a few NumPy passes over the
values the step already holds.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from etl.core.stats.features import FLOAT, INT, STRING, FeatureSpec, SplitStatistics
from etl.core.stats.step import ROWS, SERIES
from etl.timeseries.roles import ColumnRoles
from etl.timeseries.series import Segment, SeriesRows
from reader.format import contract

LABEL = "label"
LENGTH, PIECES, GAPS, MISSING = "length", "pieces", "gaps", "missing"
SERIES_COUNTS = (LENGTH, PIECES, GAPS, MISSING)
# Rows of a split held back before they are added at once (~1 MB per value column).
FLUSH_ROWS = 1 << 17

# ((split, ROWS | SERIES), (bucket, SplitStatistics)): what a bucket hands on.
Partial = tuple[tuple[str, str], tuple[int, SplitStatistics]]


@dataclasses.dataclass(frozen=True)
class StatisticsLayout:
    """The columns the statistics describe: the real and the categorical columns'
    names, in the order a row's values hold them, and whether series have a label.

    Raises:
      ValueError: with labels, a column named ``label`` (the label's feature).
    """

    reals: tuple[str, ...]
    categoricals: tuple[str, ...] = ()
    classification: bool = False

    def __post_init__(self) -> None:
        if self.classification and LABEL in (*self.reals, *self.categoricals):
            raise ValueError(f"A value column is named {LABEL!r}, the name of the series "
                             f"label's statistics feature; rename the column or pass "
                             f"--statistics=off.")

    @classmethod
    def of(cls, roles: ColumnRoles | None, classification: bool) -> StatisticsLayout:
        """The layout of the job's column roles.

        Raises:
          ValueError: without roles (they name the columns).
        """
        if roles is None:
            raise ValueError("Row statistics need the columns' names: give the series "
                             "step its ColumnRoles (SeriesSettings.roles).")
        return cls(roles.reals, roles.categoricals, classification)

    def row_features(self) -> list[FeatureSpec]:
        features = [FeatureSpec(name, FLOAT) for name in self.reals]
        features += [FeatureSpec(name, STRING) for name in self.categoricals]
        return features + ([FeatureSpec(LABEL, STRING)] if self.classification else [])

    def series_features(self) -> list[FeatureSpec]:
        features = [FeatureSpec(name, INT) for name in SERIES_COUNTS]
        return features + ([FeatureSpec(LABEL, STRING)] if self.classification else [])


class _PendingRows:
    """A split's kept rows not yet added: blocks of values ``[rows, F]``, and the
    label and number of rows of each series they come from."""

    def __init__(self) -> None:
        self.blocks: list[np.ndarray] = []
        self.labels: list[str | None] = []
        self.sizes: list[int] = []
        self.num_rows = 0

    def add(self, pieces: Sequence[Segment], label: str | None) -> None:
        self.blocks += [piece.values for piece in pieces]
        rows = sum(len(piece) for piece in pieces)
        self.labels.append(label)
        self.sizes.append(rows)
        self.num_rows += rows


def split_indices(uncut: Mapping[str, Sequence[Segment]], times: np.ndarray) -> np.ndarray:
    """Index in ``contract.SPLITS`` of the split whose time range holds each of
    ``times``: the last split whose first clean row is at or before it (the first
    split with rows for times before them all).

    Args:
      uncut: a series' pieces per split as ``series.split_pieces`` cut them (in time
        order; the splits' time ranges follow each other in ``contract.SPLITS`` order).
      times: timestamps of the series (any order).
    """
    present = [index for index, split in enumerate(contract.SPLITS) if uncut[split]]
    starts = np.array([uncut[contract.SPLITS[index]][0].times[0] for index in present])
    at = np.searchsorted(starts, times, side="right") - 1
    return np.asarray(present, np.int64)[np.maximum(at, 0)]


class BucketStatistics:
    """Mergeable ``ROWS`` and ``SERIES`` statistics of one bucket's kept series.

    Usage::

        statistics = BucketStatistics(StatisticsLayout(("value",)), categories)
        statistics.add_series(parsed, cleaned.segments, uncut, pieces, label)
        for partial in statistics.partials(bucket): ...

    Args:
      layout: the columns.
      categories: the texts the rows' categorical codes index (the bucket's).
    """

    def __init__(self, layout: StatisticsLayout, categories: Sequence[str]) -> None:
        self._layout = layout
        # A code's text; the empty text (an empty cell) is a missing value.
        self._texts = pa.array([text or None for text in categories], pa.string())
        self._empty = np.array([not text for text in categories], bool)
        self._rows = {split: SplitStatistics(layout.row_features())
                      for split in contract.SPLITS}
        self._pending = {split: _PendingRows() for split in contract.SPLITS}
        self._series: dict[str, dict[str, list[Any]]] = {
            split: {name: [] for name in (*SERIES_COUNTS, LABEL)}
            for split in contract.SPLITS}

    def add_series(self, parsed: SeriesRows, segments: Sequence[Segment],
                   uncut: Mapping[str, Sequence[Segment]],
                   pieces: Mapping[str, Sequence[Segment]], label: str | None) -> None:
        """Adds one kept series.

        Args:
          parsed: its rows as parsed (before the roles' checks and cleaning).
          segments: its clean rows cut at time gaps (``series.clean_rows``).
          uncut: ``segments`` per split (``series.split_pieces``).
          pieces: the split's pieces the windows are cut from (``uncut``, further cut
            at rows missing a known covariate).
          label: the series' label; None without labels.
        """
        if not any(uncut[split] for split in contract.SPLITS):
            return
        num_splits = len(contract.SPLITS)
        gap_rows = np.array([segment.times[0] for segment in segments[1:]], np.float64)
        gaps = np.bincount(split_indices(uncut, gap_rows), minlength=num_splits)
        cells = self._missing_cells(parsed.values)
        rows = np.flatnonzero(cells)
        missing = np.bincount(split_indices(uncut, parsed.times[rows]), weights=cells[rows],
                              minlength=num_splits).astype(np.int64)
        for index, split in enumerate(contract.SPLITS):
            kept = pieces[split]
            if not kept:
                continue
            pending = self._pending[split]
            pending.add(kept, label)
            column = self._series[split]
            for name, value in ((LENGTH, pending.sizes[-1]), (PIECES, len(kept)),
                                (GAPS, int(gaps[index])), (MISSING, int(missing[index])),
                                (LABEL, label)):
                column[name].append(value)
            if pending.num_rows >= FLUSH_ROWS:
                self._flush(split)

    def _missing_cells(self, values: np.ndarray) -> np.ndarray:
        """Empty cells of each row of ``values`` ``[rows, F]``."""
        num_reals = len(self._layout.reals)
        cells = np.count_nonzero(np.isnan(values[:, :num_reals]), axis=1)
        if self._layout.categoricals:
            codes = values[:, num_reals:].astype(np.int64)
            cells += np.count_nonzero(self._empty[codes], axis=1)
        return cells

    def _flush(self, split: str) -> None:
        """Adds the split's pending rows, a whole column at a time."""
        pending = self._pending[split]
        if not pending.num_rows:
            return
        layout = self._layout
        values = np.concatenate(pending.blocks)
        num_reals = len(layout.reals)
        columns: dict[str, Any] = {name: np.ascontiguousarray(values[:, index])
                                   for index, name in enumerate(layout.reals)}
        for index, name in enumerate(layout.categoricals):
            columns[name] = self._texts.take(pa.array(
                values[:, num_reals + index].astype(np.int64)))
        if layout.classification:
            owners = np.repeat(np.arange(len(pending.sizes)), pending.sizes)
            columns[LABEL] = pa.array(pending.labels, pa.string()).take(pa.array(owners))
        self._rows[split].add(len(values), columns)
        self._pending[split] = _PendingRows()

    def partials(self, bucket: int) -> list[Partial]:
        """Each split's ``ROWS`` and ``SERIES`` statistics (compacted), keyed for
        ``WriteStatistics`` with ``bucket`` as their sort key; splits without rows
        left out. Call it once, after the bucket's last series."""
        result: list[Partial] = []
        for split in contract.SPLITS:
            self._flush(split)
            column = self._series[split]
            num_series = len(column[LENGTH])
            if not num_series:
                continue
            series = SplitStatistics(self._layout.series_features())
            entries: dict[str, Any] = {name: np.array(column[name], np.int64)
                                       for name in SERIES_COUNTS}
            if self._layout.classification:
                entries[LABEL] = column[LABEL]
            series.add(num_series, entries)
            for statistics in (self._rows[split], series):
                statistics.compact()
            result += [((split, ROWS), (bucket, self._rows[split])),
                       ((split, SERIES), (bucket, series))]
        return result
