"""Time-series job: long-format series → normalised sliding windows as sharded TFRecords.

Usage::

    python -m pipelines.timeseries --input=<csv | jsonl | parquet file or glob> \\
        --output_dir=<dir> --window_size=24 [--shift=1 --stride=1 --horizon=1] \\
        [--value_columns=a,b --timestamp_column=timestamp --series_id_column=series_id] \\
        [--labels=labels.csv] [Beam flags]

Same contract as the image job (sharding, manifest, determinism, dead letters); see
docs/FORMAT.md for the window layout and every cleaning and splitting rule.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import apache_beam as beam
import numpy as np
from apache_beam.options.pipeline_options import GoogleCloudOptions, PipelineOptions

from etl import accounting, dead_letters
from etl import timeseries_preprocessing as ts_preprocessing
from etl import timeseries_series as ts_series
from etl.dead_letters import Rejection
from etl.manifest import WriteManifest
from etl.sharding import WriteShards
from etl.splits import split_index
from etl.timeseries_sources import (
    REJECTED,
    Columns,
    ReadTimeSeriesRows,
    Row,
    input_format,
    matched_files,
    parse_timestamp,
    read_labels,
)
from etl.transform import ANALYZE, AnalyzeAndTransform
from pipelines import common
from reader import contract
from reader.contract import CLASSIFICATION, FORECAST

STATS = "stats"
_LABEL_FILE_SUFFIXES = (".csv", ".jsonl", ".json")


class TimeSeriesOptions(common.DatasetOptions, PipelineOptions):
    """Options of the time-series job. --input: long-format rows, a .csv (with header),
    .jsonl or .parquet file, or a glob of them."""

    @classmethod
    def _add_argparse_args(cls, parser: Any) -> None:
        parser.add_argument("--series_id_column", default="series_id")
        parser.add_argument("--timestamp_column", default="timestamp",
                            help="Numbers, or ISO 8601 dates/times (naive = UTC).")
        parser.add_argument("--value_columns", default="value",
                            help="Comma-separated value columns (several: multivariate).")
        # Beam already owns --labels (Dataflow job labels, key=value); a --labels value
        # naming a .csv/.jsonl file is taken as ours (see labels_path), and
        # --series_labels is the unambiguous spelling.
        parser.add_argument("--series_labels", default=None,
                            help="Optional .csv/.jsonl mapping series id → label (also "
                                 "accepted as --labels=<file>): classify windows by their "
                                 "series' label instead of forecasting.")
        parser.add_argument("--label_column", default="label",
                            help="Label column of the --labels file (its series column "
                                 "is --series_id_column).")
        parser.add_argument("--window_size", type=int, default=None,
                            help="Rows per window (required).")
        parser.add_argument("--shift", type=int, default=1,
                            help="Rows between the starts of consecutive windows.")
        parser.add_argument("--stride", type=int, default=1,
                            help="Rows between consecutive elements of a window.")
        parser.add_argument("--horizon", type=int, default=None,
                            help="Target rows after the window (same stride). Default 1; "
                                 "must be 0 with --labels.")
        parser.add_argument("--split_by", default=None, choices=ts_series.SPLIT_MODES,
                            help="time (default without --labels): by time within each "
                                 "series; series (default with --labels): whole series "
                                 "by a hash of the id.")
        parser.add_argument("--split_times", default=None,
                            help="With --split_by=time: 'T1,T2' global cut-offs (train < "
                                 "T1 <= validation < T2 <= test) instead of fractions.")
        parser.add_argument("--duplicates", default="mean",
                            choices=ts_series.DUPLICATE_POLICIES,
                            help="Rows sharing a timestamp: average them, or reject all.")
        parser.add_argument("--missing", default="drop", choices=ts_series.MISSING_POLICIES,
                            help="Rows with a missing value: drop, forward-fill, "
                                 "interpolate in time, or reject as dead letters.")
        parser.add_argument("--max_gap", default="auto",
                            help="Split a series where consecutive timestamps are further "
                                 "apart than this (timestamp units; seconds for dates), "
                                 "'auto' (1.5 x the median step) or 'none'.")
        parser.add_argument("--normalize", default="global",
                            choices=("global", "per_series"),
                            help="z-score statistics over all train rows, or per series "
                                 "(needs --split_by=time).")


def labels_path(options: PipelineOptions) -> str | None:
    """The series-labels file from ``--series_labels`` or ``--labels=<file>``.

    A ``--labels`` value ending in .csv/.jsonl/.json is removed from Beam's Dataflow
    job labels (which must be ``key=value``); other ``--labels`` values stay there.

    Raises:
        ValueError: if two different labels files are named.
    """
    cloud = options.view_as(GoogleCloudOptions)
    files = [v for v in (cloud.labels or []) if v.lower().endswith(_LABEL_FILE_SUFFIXES)]
    if files:
        cloud.labels = [v for v in cloud.labels if v not in files] or None
    named = set(files) | ({options.view_as(TimeSeriesOptions).series_labels} - {None})
    if len(named) > 1:
        raise ValueError(f"Several labels files named: {sorted(named)}.")
    return named.pop() if named else None


def _parse_max_gap(text: str) -> float | str:
    if text in ("auto", "none"):
        return text
    try:
        return float(text)
    except ValueError:
        raise ValueError(f"--max_gap must be a number, 'auto' or 'none', got {text!r}."
                         ) from None


def _parse_split_times(text: str | None) -> tuple[float, float] | None:
    if not text:
        return None
    parts = [p.strip() for p in text.split(",")]
    if len(parts) != 2:
        raise ValueError(f"--split_times takes 'T1,T2', got {text!r}.")
    try:
        first, second = (parse_timestamp(p)[0] for p in parts)
    except ValueError as e:
        raise ValueError(f"--split_times: {e}") from None
    return first, second


@dataclasses.dataclass(frozen=True)
class TimeSeriesJob:
    """The time-series job's validated settings."""

    input: str
    columns: Columns
    labels: tuple[tuple[str, str], ...]  # (series id, label), sorted; empty: forecast
    label_rejections: tuple[Rejection, ...]
    windowing: ts_series.Windowing
    cleaning: ts_series.Cleaning
    time_split: ts_series.TimeSplit
    preprocessing: ts_preprocessing.SeriesPreprocessing
    output: common.OutputSettings

    @property
    def classification(self) -> bool:
        return self.preprocessing.classification

    @classmethod
    def from_options(cls, options: TimeSeriesOptions) -> TimeSeriesJob:
        """Validates every option, the input files and the labels file.

        Raises:
            ValueError: naming the flag (or file) at fault.
        """
        common.require(options, "input", "window_size")
        output = common.OutputSettings.from_options(options, default_name="timeseries")
        input_format(options.input)
        matched_files(options.input)
        values = tuple(v.strip() for v in options.value_columns.split(",") if v.strip())
        if not values:
            raise ValueError("--value_columns names no column.")
        columns = Columns(options.series_id_column, options.timestamp_column, values)
        labels_file = labels_path(options)
        classification = labels_file is not None
        labels, label_rejections = ({}, [])
        if classification:
            labels, label_rejections = read_labels(labels_file, columns.series_id,
                                                   options.label_column)
        horizon = options.horizon if options.horizon is not None else (
            0 if classification else 1)
        split_by = options.split_by or ("series" if classification else "time")
        if options.normalize == "per_series" and split_by != "time":
            raise ValueError("--normalize=per_series needs --split_by=time (each series "
                             "must have train rows to fit its statistics on).")
        if options.split_times and split_by != "time":
            raise ValueError("--split_times applies to --split_by=time only.")
        return cls(
            input=options.input,
            columns=columns,
            labels=tuple(sorted(labels.items())),
            label_rejections=tuple(label_rejections),
            windowing=ts_series.Windowing(options.window_size, options.shift,
                                          options.stride, horizon),
            cleaning=ts_series.Cleaning(options.duplicates, options.missing,
                                        _parse_max_gap(options.max_gap)),
            time_split=ts_series.TimeSplit(split_by, output.fractions,
                                           _parse_split_times(options.split_times)),
            preprocessing=ts_preprocessing.SeriesPreprocessing(
                window_size=options.window_size, horizon=horizon,
                num_features=len(values), classification=classification,
                per_series=options.normalize == "per_series"),
            output=output,
        )

    def describe(self) -> dict[str, Any]:
        """The manifest's "preprocessing" entry."""
        return {
            "windowing": dataclasses.asdict(self.windowing),
            "value_columns": list(self.columns.values),
            "timestamp_column": self.columns.timestamp,
            "series_id_column": self.columns.series_id,
            "layout": "window: float32 [window_size, num_features], row-major (time "
                      "first); target: float32 [horizon, num_features] or label id",
            "cleaning": dataclasses.asdict(self.cleaning),
            "split_by": self.time_split.mode,
            "split_fractions": self.output.fractions.as_dict(),
            "split_times": (list(self.time_split.cutoffs)
                            if self.time_split.cutoffs else None),
            "normalize": "per_series" if self.preprocessing.per_series else "global",
            "normalizer": "z-score per value column, tf.Transform mean/var over train "
                          "rows (non-overlapping train tiles); std 0 -> 1",
            **self.output.describe(),
        }


def _instance(series_id: str, piece: ts_series.Segment, start: int, window: np.ndarray,
              target: np.ndarray | None, label: str | None) -> dict[str, Any]:
    instance = {
        contract.WINDOW_KEY: window.astype(np.float32),
        contract.SERIES_ID_KEY: series_id,
        contract.WINDOW_START_KEY: piece.texts[start],
        contract.SOURCE_KEY: f"{series_id}@{piece.texts[start]}",
    }
    if label is not None:
        instance[contract.LABEL_NAME_KEY] = label
    else:
        instance[contract.TARGET_KEY] = target.astype(np.float32)
    return instance


class ProcessSeries(beam.DoFn):
    """``(series id, rows)`` → ``(split, raw window)``; tagged train tiles
    (``"analyze"``), rejections and ``(counter, n)`` stats."""

    def __init__(self, job: TimeSeriesJob) -> None:
        self._windowing = job.windowing
        self._cleaning = job.cleaning
        self._time_split = job.time_split
        self._classification = job.classification
        self._horizon_zeros = np.zeros(
            (job.windowing.horizon, job.preprocessing.num_features), np.float32)

    def process(self, element: tuple[str, Iterable[Row]], labels: dict[str, str]
                ) -> Iterator[Any]:
        series_id, rows = element
        rows = list(rows)
        # GroupByKey order varies by runner: name the series by its first input row.
        first_source = min(row.source for row in rows)
        stats: collections.Counter = collections.Counter(series=1)
        label = labels.get(series_id) if self._classification else None
        if self._classification and label is None:
            stats.update(rows_read=len(rows), rows_rejected=len(rows))
            yield from self._reject(Rejection(
                key=series_id, source=first_source, reason=dead_letters.UNLABELLED_SERIES,
                message=f"No label for this series in --labels ({len(rows)} rows)."))
            yield from self._stats(stats)
            return
        cleaned = ts_series.clean_series(series_id, rows, self._cleaning)
        stats.update(cleaned.stats)
        for rejection in cleaned.rejections:
            yield from self._reject(rejection)
        pieces = ts_series.split_pieces(series_id, cleaned.segments, self._time_split)
        windows = []
        for split in contract.SPLITS:
            for piece in pieces[split]:
                for start, window, target in ts_series.windows(piece, self._windowing):
                    windows.append((split, _instance(series_id, piece, start, window,
                                                     target, label)))
        if not windows:
            if stats["rows_kept"]:
                stats.update(series_too_short=1, rows_in_short_series=stats["rows_kept"])
                yield from self._reject(Rejection(
                    key=series_id, source=first_source,
                    reason=dead_letters.SERIES_TOO_SHORT,
                    message=f"{stats['rows_kept']} clean rows in {len(cleaned.segments)} "
                            f"segment(s) give no window of span {self._windowing.span}."))
            yield from self._stats(stats)
            return
        yield from windows
        for piece in pieces[contract.TRAIN]:
            for start, tile in ts_series.tiles(piece, self._windowing.window_size):
                yield beam.pvalue.TaggedOutput(ANALYZE, _instance(
                    series_id, piece, start, tile, self._horizon_zeros, label))
        for split in contract.SPLITS:
            stats[f"windows_{split}"] += sum(1 for s, _ in windows if s == split)
        yield from self._stats(stats)

    @staticmethod
    def _reject(rejection: Rejection) -> Iterator[Any]:
        return dead_letters.route(rejection)

    @staticmethod
    def _stats(stats: collections.Counter) -> Iterator[Any]:
        for name in sorted(stats):
            yield beam.pvalue.TaggedOutput(STATS, (name, int(stats[name])))


def _label_count(element: tuple[str, dict[str, Any]]) -> tuple[tuple[str, str], int]:
    split, instance = element
    return (split, instance[contract.LABEL_NAME_KEY]), 1


def _timeseries_entry(counts: dict[str, int], job_params: dict[str, Any],
                      parse_rejected: int) -> dict[str, Any]:
    return {"timeseries": {**job_params, "counts": dict(sorted(counts.items())),
                           "parse_rejected": parse_rejected}}


def _inputs_entry(count: int) -> dict[str, int]:
    return {"inputs": count}


def build_pipeline(pipeline: beam.Pipeline, job: TimeSeriesJob) -> None:
    """Adds the time-series job's transforms to ``pipeline``."""
    output_dir = job.output.output_dir
    read = pipeline | "ReadRows" >> ReadTimeSeriesRows(job.input, job.columns)
    labels = beam.pvalue.AsDict(pipeline | "LabelsBySeries" >> beam.Create(job.labels))
    processed = (
        read.rows
        | "KeyBySeries" >> beam.Map(lambda row: (row.series_id, row))
        | "GroupBySeries" >> beam.GroupByKey()
        | "ProcessSeries" >> beam.ParDo(ProcessSeries(job), labels=labels).with_outputs(
            ANALYZE, REJECTED, STATS, main="windows")
    )
    # (split, raw window instance)
    windows = processed.windows
    rejected_summary = (
        (read[REJECTED], processed[REJECTED],
         pipeline | "LabelFileRejections" >> beam.Create(job.label_rejections))
        | "FlattenRejections" >> beam.Flatten()
        | "WriteRejections" >> dead_letters.WriteRejections(output_dir)
    )
    label_counts = (
        windows | "KeyBySplitAndLabel" >> beam.Map(_label_count)
        | "CountLabels" >> beam.CombinePerKey(sum)
    ) if job.classification else pipeline | "NoLabels" >> beam.Create([])
    # Input rows: every parsed row plus every line rejected while parsing.
    parse_rejected = read[REJECTED] | "CountParseRejections" >> beam.combiners.Count.Globally()
    inputs = (
        (read.rows, read[REJECTED])
        | "FlattenInputRows" >> beam.Flatten()
        | "CountInputRows" >> beam.combiners.Count.Globally()
        | "InputsEntry" >> beam.Map(_inputs_entry)
    )
    counts = (
        processed[STATS]
        | "SumStats" >> beam.CombinePerKey(sum)
        | "StatsToDict" >> beam.combiners.ToDict()
        | "TimeSeriesEntry" >> beam.Map(_timeseries_entry, job_params={
            "value_columns": list(job.columns.values),
            "num_features": job.preprocessing.num_features,
            **dataclasses.asdict(job.windowing)},
            parse_rejected=beam.pvalue.AsSingleton(parse_rejected))
    )
    by_split = windows | "PartitionBySplit" >> beam.Partition(split_index,
                                                             len(contract.SPLITS))
    raw = {split: by_split[i] | f"DropSplitKey[{split}]" >> beam.Values()
           for i, split in enumerate(contract.SPLITS)}
    # The normaliser sees every train row once (tiles), never validation or test.
    raw[ANALYZE] = processed[ANALYZE]
    examples, transform_written = raw | "Preprocess" >> AnalyzeAndTransform(
        functools.partial(ts_preprocessing.preprocessing_fn, config=job.preprocessing),
        job.preprocessing.raw_feature_spec(), output_dir, job.output.tft_temp_dir)
    shards = examples | "WriteShards" >> WriteShards(
        output_dir, job.output.name, num_shards=job.output.num_shards,
        target_shard_bytes=job.output.target_shard_bytes, gzip_level=job.output.gzip_level)
    _ = pipeline | "WriteManifest" >> WriteManifest(
        output_dir, job.output.name, job.describe(), kind=contract.TIMESERIES,
        task=CLASSIFICATION if job.classification else FORECAST, shards=shards,
        label_counts=label_counts, rejected=rejected_summary,
        transform_written=transform_written, extras=[counts, inputs],
        check=functools.partial(accounting.check_timeseries,
                                max_error_fraction=job.output.max_error_fraction),
        describe_transform=functools.partial(ts_preprocessing.describe_normalisation,
                                             config=job.preprocessing))


def run(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Runs the time-series job and returns the manifest it wrote.

    Raises:
        ValueError: for invalid options or inputs, before anything runs.
    """
    return common.run_job(argv, TimeSeriesOptions, TimeSeriesJob.from_options,
                          build_pipeline)


if __name__ == "__main__":
    common.main(run)

