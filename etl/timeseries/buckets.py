"""The series step: a bucket's row chunks → cleaned, split series, window runs, stats.

For each series of a bucket (in id order): gather its slices from every chunk (read
back from the read ranges' spill files), clean and split them
(``etl/timeseries/series.py``), sum its train rows exactly for the normaliser, and
spill its windows' rows as runs of windows (``etl/timeseries/runs.py``). Out come
only small records: ``WindowRun``s, ``Rejection``s, counters, each split's longest
piece, and one analysis instance per series with train rows; with statistics on,
per bucket and split the statistics of the rows and series it keeps
(``etl/timeseries/row_statistics.py``).
"""

from __future__ import annotations

import collections
import dataclasses
import posixpath
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import apache_beam as beam
import numpy as np

from etl.core import dead_letters
from etl.core.dead_letters import Rejection
from etl.core.io import storage
from etl.core.transform import exact_stats
from etl.timeseries import covariates, row_statistics
from etl.timeseries import series as ts_series
from etl.timeseries.preprocessing import analysis_instance
from etl.timeseries.roles import ColumnRoles
from etl.timeseries.rows.chunks import ChunkRef, RowChunk, own_categories, read_chunks
from etl.timeseries.rows.ranges import POSITION_FILE_STRIDE
from etl.timeseries.rows.time_texts import TimeTexts
from etl.timeseries.runs import WindowRun, rows_of, run_bounds, run_windows, write_run
from etl.timeseries.window_examples import WindowSchema
from reader.format import contract

# Tagged outputs of the series step besides the runs (main) and rejections.
STATS = "stats"  # (counter name, n), summed
LONGEST = "longest"  # (split, rows of its longest piece), maximum
ANALYSIS = "analysis"  # one tf.Transform instance per series with train rows
# ((split, ROWS | SERIES), (bucket, SplitStatistics)), once per bucket and split with rows
STATISTICS = "statistics"


@dataclasses.dataclass(frozen=True)
class SeriesSettings:
    """What the series step needs to know."""

    windowing: ts_series.Windowing
    cleaning: ts_series.Cleaning
    time_split: ts_series.TimeSplit
    schema: WindowSchema
    spill_dir: str
    roles: ColumnRoles | None = None  # None: every column is a target
    statistics: bool = False  # emit the kept rows' and series' STATISTICS

    @property
    def classification(self) -> bool:
        return self.schema.classification


def source_text(position: int, files: Sequence[str], fmt: str) -> str:
    """``<file>:<line>`` (``<file>:row<n>`` for Parquet) of an input position."""
    file_index, number = divmod(int(position), POSITION_FILE_STRIDE)
    return f"{files[file_index]}:{'row' if fmt == 'parquet' else ''}{number}"


def _bucket_codes(chunks: Sequence[RowChunk]) -> tuple[list[RowChunk], list[str]]:
    """The chunks with their categorical codes renumbered into one list of the
    bucket's category texts, sorted (returned): codes then order rows as their texts
    do, whatever order the chunks came in."""
    categories = sorted(set().union(*(chunk.categories for chunk in chunks)))
    if not categories:
        return list(chunks), []
    index = {text: code for code, text in enumerate(categories)}
    renumbered = []
    for chunk in chunks:
        lookup = np.array([index[text] for text in chunk.categories], np.float64)
        values = chunk.values.copy()
        columns = slice(values.shape[1] - chunk.num_categoricals, None)
        values[:, columns] = lookup[values[:, columns].astype(np.int64)]
        renumbered.append(dataclasses.replace(chunk, values=values, categories=categories))
    return renumbered, categories


def gather_series(chunks: Iterable[RowChunk]
                  ) -> tuple[dict[str, ts_series.SeriesRows], list[str]]:
    """Every series of ``chunks`` with all its rows (in any order), and the category
    texts their categorical codes index."""
    chunks, categories = _bucket_codes(list(chunks))
    slices: dict[str, list[tuple[RowChunk, slice, int]]] = collections.defaultdict(list)
    for chunk in chunks:
        for series_id, kinds, rows in chunk.slices():
            slices[series_id].append((chunk, rows, kinds))
    series = {}
    for series_id, found in slices.items():
        kinds = 0
        for _, _, k in found:
            kinds |= k
        series[series_id] = ts_series.SeriesRows(
            times=np.concatenate([c.times[r] for c, r, _ in found]),
            values=np.concatenate([c.values[r] for c, r, _ in found]),
            positions=np.concatenate([c.positions[r] for c, r, _ in found]),
            texts=TimeTexts.concat([c.time_texts().take(np.arange(r.start, r.stop))
                                    for c, r, _ in found]),
            kinds=kinds)
    return series, categories


def _run_bytes(schema: WindowSchema, series_id: str, starts: list[str],
               label: str | None) -> int:
    """Exact serialized bytes of a run's examples (a label id counted as 1 byte)."""
    series_bytes = len(series_id.encode())
    label_bytes = len((label or "").encode())
    lengths = collections.Counter(len(s.encode()) for s in starts)
    return sum(count * schema.example_bytes(series_bytes, length, label_bytes)
               for length, count in lengths.items())


class _Spill:
    """The bucket's spill file being written, and where the next run goes."""

    def __init__(self, path: str, out: Any) -> None:
        self.path = path
        self._out = out
        self._offset = 0

    def write(self, values: np.ndarray, starts: list[str], times: np.ndarray | None,
              categories: tuple[np.ndarray, list[str]] | None
              ) -> tuple[int, int, int]:
        """Appends a run; returns its (offset, start text bytes, category bytes)."""
        offset = self._offset
        written, text_bytes, category_bytes = write_run(self._out, values, starts, times,
                                                        categories)
        self._offset += written
        return offset, text_bytes, category_bytes


class ProcessSeriesBucket(beam.DoFn):
    """``(bucket, [ChunkRef])`` → ``WindowRun``s; tagged ``Rejection``s, ``STATS``,
    ``LONGEST``, ``ANALYSIS`` and (with ``settings.statistics``) ``STATISTICS``
    records. Reads the bucket's chunks and writes its window rows' spill file."""

    def __init__(self, settings: SeriesSettings, files: Sequence[str], fmt: str) -> None:
        self._settings = settings
        self._files = tuple(files)
        self._fmt = fmt
        self._categories: list[str] = []  # the texts of the bucket's categorical codes
        self._layout = (row_statistics.StatisticsLayout.of(
            settings.roles, settings.classification) if settings.statistics else None)
        self._statistics: row_statistics.BucketStatistics | None = None  # the bucket's

    def _source(self, position: int) -> str:
        return source_text(position, self._files, self._fmt)

    def process(self, element: tuple[int, Iterable[ChunkRef]], labels: Mapping[str, str]
                ) -> Iterator[Any]:
        bucket, refs = element
        series, self._categories = gather_series(read_chunks(refs))
        self._statistics = None if self._layout is None else (
            row_statistics.BucketStatistics(self._layout, self._categories))
        path = posixpath.join(self._settings.spill_dir, f"bucket-{bucket:05d}.bin")
        # Emitted once the spill file is complete under its final name.
        outputs: list[Any] = []
        with storage.write(path) as out:
            spill = _Spill(path, out)
            for series_id in sorted(series):
                outputs += self._series(series_id, series[series_id], labels, spill)
        yield from outputs
        if self._statistics is not None:
            for partial in self._statistics.partials(bucket):
                yield beam.pvalue.TaggedOutput(STATISTICS, partial)

    def _series(self, series_id: str, rows: ts_series.SeriesRows, labels: Mapping[str, str],
                spill: _Spill) -> Iterator[Any]:
        settings = self._settings
        windowing = settings.windowing
        stats: collections.Counter = collections.Counter(series=1)
        # Name the series by its first input row (chunks arrive in any order).
        first_source = self._source(int(rows.positions.min()))
        label = labels.get(series_id) if settings.classification else None
        if settings.classification and label is None:
            stats.update(rows_read=len(rows), rows_rejected=len(rows))
            yield from dead_letters.route(Rejection(
                key=series_id, source=first_source, reason=dead_letters.UNLABELLED_SERIES,
                message=f"No label for this series in --labels ({len(rows)} rows)."))
            yield from _stats(stats)
            return
        parsed, roles = rows, settings.roles
        if roles is not None and roles.given:
            checked, rejections = covariates.check_series(
                series_id, rows, roles, self._source, stats, self._categories)
            for rejection in rejections:
                yield from dead_letters.route(rejection)
            if checked is None:
                yield from _stats(stats)
                return
            rows = checked
        cleaned = ts_series.clean_rows(
            series_id, rows, settings.cleaning, self._source,
            roles.missing_policy_columns if roles else None,
            first_columns=roles.categorical_columns if roles else ())
        stats.update(cleaned.stats)
        for rejection in cleaned.rejections:
            yield from dead_letters.route(rejection)
        uncut = ts_series.split_pieces(series_id, cleaned.segments, settings.time_split)
        pieces = _cut_at_missing_known(uncut, roles, windowing, stats)
        counts = {split: [windowing.count(len(p)) for p in pieces[split]]
                  for split in contract.SPLITS}
        if not any(sum(c) for c in counts.values()):
            if stats["rows_kept"]:
                stats.update(series_too_short=1, rows_in_short_series=stats["rows_kept"])
                yield from dead_letters.route(Rejection(
                    key=series_id, source=first_source,
                    reason=dead_letters.SERIES_TOO_SHORT,
                    message=f"{stats['rows_kept']} clean rows in {len(cleaned.segments)} "
                            f"segment(s) give no window of span {windowing.span}."))
            yield from _stats(stats)
            return
        for split in contract.SPLITS:
            stats[f"windows_{split}"] += sum(counts[split])
            if pieces[split]:
                yield beam.pvalue.TaggedOutput(
                    LONGEST, (split, max(len(p) for p in pieces[split])))
        if pieces[contract.TRAIN]:
            yield beam.pvalue.TaggedOutput(ANALYSIS, self._analysis_instance(
                series_id, pieces[contract.TRAIN], sum(counts[contract.TRAIN]), label))
        yield from self._runs(series_id, pieces, counts, label, first_source, spill)
        if self._statistics is not None:
            self._statistics.add_series(parsed, cleaned.segments, uncut, pieces, label)
        yield from _stats(stats)

    def _analysis_instance(self, series_id: str, train: list[ts_series.Segment],
                           train_windows: int, label: str | None) -> dict[str, Any]:
        """The series' train rows summed (reals) and counted (categoricals)."""
        roles, windowing = self._settings.roles, self._settings.windowing
        values = np.concatenate([p.values for p in train])
        num_reals = len(roles.reals) if roles else values.shape[1]
        moments = exact_stats.moments_of(_train_values(
            values[:, :num_reals].astype(np.float32), roles))
        return analysis_instance(
            series_id, moments, label, train_windows,
            _train_categories(values[:, num_reals:], self._categories), roles,
            windowing.window_size + windowing.horizon)

    def _runs(self, series_id: str, pieces: dict[str, list[ts_series.Segment]],
              counts: dict[str, list[int]], label: str | None, first_source: str,
              spill: _Spill) -> Iterator[WindowRun]:
        """Each piece's windows in runs, their rows spilled."""
        settings, windowing = self._settings, self._settings.windowing
        with_times = bool(settings.roles is not None and settings.roles.calendar)
        num_reals = len(settings.roles.reals) if settings.roles else None  # None: all
        per_run = run_windows(settings.schema.example_bytes(
            len(series_id.encode()), 20, len((label or "").encode())))
        for split in contract.SPLITS:
            for piece, count in zip(pieces[split], counts[split], strict=True):
                for first, num_windows in run_bounds(count, per_run):
                    row = first * windowing.shift
                    num_rows = rows_of(num_windows, windowing)
                    starts = piece.texts.take(
                        row + np.arange(num_windows) * windowing.shift).strings()
                    values = piece.values[row:row + num_rows]
                    categories = (None if num_reals is None else
                                  _run_categories(values[:, num_reals:], self._categories))
                    offset, text_bytes, category_bytes = spill.write(
                        values[:, :num_reals], starts,
                        piece.times[row:row + num_rows] if with_times else None,
                        categories)
                    yield WindowRun(
                        split=split, key=f"{series_id}@{starts[0]}", series_id=series_id,
                        label=label, source=first_source, spill_path=spill.path,
                        offset=offset, num_rows=num_rows, num_windows=num_windows,
                        text_bytes=text_bytes,
                        num_bytes=_run_bytes(settings.schema, series_id, starts, label),
                        num_categories=len(categories[1]) if categories else 0,
                        category_bytes=category_bytes)


def _cut_at_missing_known(pieces: dict[str, list[ts_series.Segment]],
                          roles: ColumnRoles | None, windowing: ts_series.Windowing,
                          stats: collections.Counter) -> dict[str, list[ts_series.Segment]]:
    """Each split's pieces cut at rows missing a known covariate (``covariates``)."""
    if roles is None or not roles.known:
        return pieces
    return {split: [part for piece in pieces[split]
                    for part in covariates.cut_at_missing_known(piece, roles, windowing, stats)]
            for split in contract.SPLITS}


def _train_values(values: np.ndarray, roles: ColumnRoles | None) -> np.ndarray:
    """Train rows as the analysis sums them: targets through --target_transform."""
    if roles is None or roles.target_transform == "none":
        return values
    values = values.copy()
    targets = slice(0, len(roles.targets))
    values[:, targets] = np.log1p(values[:, targets])
    return values


def _train_categories(codes: np.ndarray, categories: Sequence[str]
                      ) -> list[tuple[list[str], list[int]]]:
    """Per categorical column, its distinct texts in the train rows ``codes``
    ``[rows, Fc]`` and how many rows hold each (the vocabulary's weights)."""
    result = []
    for column in codes.T.astype(np.int64):
        used, counts = np.unique(column, return_counts=True)
        result.append(([categories[c] for c in used.tolist()], counts.tolist()))
    return result


def _run_categories(codes: np.ndarray, categories: Sequence[str]
                    ) -> tuple[np.ndarray, list[str]] | None:
    """A run's categorical codes ``[rows, Fc]`` renumbered into the texts it uses
    (returned with them); None without categorical columns."""
    if not codes.shape[1]:
        return None
    local, used = own_categories(codes, categories)
    return local.astype(np.int32), used


def _stats(stats: collections.Counter) -> Iterator[Any]:
    for name in sorted(stats):
        yield beam.pvalue.TaggedOutput(STATS, (name, int(stats[name])))

