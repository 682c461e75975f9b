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

if __name__ == "__main__":
    # ``python -m pipelines.timeseries`` runs this file as ``__main__``: it prints
    # --help before importing anything heavy, or runs the job of the imported module,
    # and stops before defining anything here: the steps then pickle by reference to
    # ``pipelines.timeseries``, which workers import from the installed package, and
    # nothing is pickled by value from ``__main__`` (nor is any options class defined
    # twice).
    from pipelines.command import run_job_command

    run_job_command("timeseries")
else:
    # Imported (by the command above, a worker, a test): TensorFlow, which the imports
    # below load, starts without its start-up lines (pipelines/quiet_start.py).
    from pipelines.quiet_start import import_tensorflow_quietly

    import_tensorflow_quietly()

import dataclasses
import functools
import posixpath
from collections.abc import Sequence
from typing import Any

import apache_beam as beam
from apache_beam.options.pipeline_options import GoogleCloudOptions, PipelineOptions
from apache_beam.utils import shared

from etl.core import dead_letters, singletons
from etl.core.column_hints import column_names
from etl.core.dead_letters import Rejection
from etl.core.publishing.inputs import InputsEntry, count_one
from etl.core.publishing.tail import ManifestSpec, PublishDataset, PublishSpec
from etl.core.run import versions
from etl.core.shards import splits
from etl.core.stats import step as stats_step
from etl.core.transform.analysis import AnalyzeAndWriteTransformFn
from etl.timeseries import accounting, buckets, categories, summary
from etl.timeseries import preprocessing as ts_preprocessing
from etl.timeseries import roles as roles_lib
from etl.timeseries import series as ts_series
from etl.timeseries.buckets import (
    ANALYSIS,
    LONGEST,
    STATS,
    ProcessSeriesBucket,
    SeriesSettings,
)
from etl.timeseries.rows import first_chunk, ranges
from etl.timeseries.rows.read import ROW_COUNTS, InputPlan, ReadSeriesChunks
from etl.timeseries.rows.sources import Columns, parse_timestamp, read_labels
from etl.timeseries.runs import PlanRunShards
from etl.timeseries.shards import TransformAndWriteWindowShard
from pipelines import arguments, common
from reader.format import contract
from reader.format.contract import CLASSIFICATION, FORECAST

_LABEL_FILE_SUFFIXES = (".csv", ".jsonl", ".json")


class TimeSeriesOptions(common.DatasetOptions, PipelineOptions):
    """Options of the time-series job. --input: long-format rows, a .csv (with header),
    .jsonl or .parquet file, or a glob of them."""

    JOB = arguments.TIMESERIES

    @classmethod
    def _add_argparse_args(cls, parser: Any) -> None:
        arguments.add_timeseries_flags(parser)


def _is_labels_file(value: str) -> bool:
    return value.lower().endswith(_LABEL_FILE_SUFFIXES)


def labels_path(options: PipelineOptions) -> str | None:
    """The series-labels file from ``--series_labels`` or ``--labels=<file>``.

    Raises:
        ValueError: if two different labels files are named.
    """
    job_labels = options.view_as(GoogleCloudOptions).labels or []
    named = ({v for v in job_labels if _is_labels_file(v)}
             | ({options.view_as(TimeSeriesOptions).series_labels} - {None}))
    if len(named) > 1:
        raise ValueError(f"Several labels files named: {sorted(named)}.")
    return named.pop() if named else None


def remove_labels_files_from_job_labels(options: PipelineOptions) -> None:
    """Takes ``--labels`` values that name a labels file out of Beam's Dataflow job
    labels (which must be ``key=value``); other ``--labels`` values stay there."""
    cloud = options.view_as(GoogleCloudOptions)
    if any(_is_labels_file(v) for v in cloud.labels or []):
        cloud.labels = [v for v in cloud.labels if not _is_labels_file(v)] or None


_COLUMN_FLAGS = ("target_columns", "past_columns", "known_columns", "static_real_columns",
                 "known_categorical_columns", "static_categorical_columns")
_ROLE_FLAGS = (*_COLUMN_FLAGS, "calendar_features", "target_transform")


def column_roles(options: TimeSeriesOptions, values: tuple[str, ...]
                 ) -> roles_lib.ColumnRoles:
    """The real columns by role; with no role flag, the value columns are the targets
    (and the windows have the single-role layout, docs/TIMESERIES_JOB.md).

    Raises:
        ValueError: a column given two roles, an unknown calendar feature or transform.
    """
    given = any(getattr(options, flag) for flag in _ROLE_FLAGS)
    names = column_names
    for flag in _COLUMN_FLAGS:
        for name in names(getattr(options, flag)):
            # The series id may be a static category (an embedding per series).
            if name == options.series_id_column and flag == "static_categorical_columns":
                continue
            if name in (options.series_id_column, options.timestamp_column):
                raise ValueError(f"--{flag} names {name!r}, the series id or timestamp "
                                 f"column; calendar features come from "
                                 f"--calendar_features, and the series id may be a "
                                 f"--static_categorical_columns column.")
    return roles_lib.ColumnRoles(
        targets=names(options.target_columns) or values,
        past=names(options.past_columns), known=names(options.known_columns),
        static_real=names(options.static_real_columns),
        known_categorical=names(options.known_categorical_columns),
        static_categorical=names(options.static_categorical_columns),
        calendar=names(options.calendar_features),
        target_transform=options.target_transform or "none", given=given,
        targets_flag="--target_columns" if options.target_columns else "--value_columns")


def _parse_max_gap(text: str) -> float | str:
    if text in ("auto", "none"):
        return text
    try:
        return float(text)
    except ValueError:
        raise ValueError(f"--max_gap must be a number, 'auto' or 'none', got {text!r}."
                         ) from None


def time_split(options: TimeSeriesOptions, split_by: str,
               fractions: splits.SplitFractions) -> ts_series.TimeSplit:
    """How rows are split: ``--split_times``' cut-offs (kept as typed, for the
    manifest), else the fractions.

    Raises:
        ValueError: for --split_times with --split_by=series, or cut-offs that are
            not two timestamps.
    """
    text = options.split_times
    if not text:
        return ts_series.TimeSplit(split_by, fractions)
    if split_by != "time":
        raise ValueError("--split_times applies to --split_by=time only.")
    parts = [p.strip() for p in text.split(",")]
    if len(parts) != 2:
        raise ValueError(f"--split_times takes 'T1,T2', got {text!r}.")
    first, second = (_cutoff(p, options.timestamp_format or None) for p in parts)
    return ts_series.TimeSplit(split_by, fractions, (first, second),
                               cutoff_texts=(parts[0], parts[1]))


def _cutoff(text: str, timestamp_format: str | None) -> float:
    """A ``--split_times`` cut-off, written as the data's timestamps are
    (``--timestamp_format``) or as ISO 8601 / a number."""
    if timestamp_format is not None:
        try:
            return parse_timestamp(text, timestamp_format)[0]
        except ValueError:
            pass
    try:
        return parse_timestamp(text)[0]
    except ValueError as e:
        also = f" nor --timestamp_format={timestamp_format}" if timestamp_format else ""
        raise ValueError(f"--split_times: {text!r} is not ISO 8601{also} ({e}).") from None


@dataclasses.dataclass(frozen=True)
class TimeSeriesJob:
    """The time-series job's validated settings."""

    input_plan: InputPlan
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

    @property
    def version(self) -> versions.DatasetVersion:
        """The dataset version a run publishes: always the first, since a time-series
        dataset is rebuilt rather than appended to (``--append`` is refused)."""
        return versions.FIRST_VERSION

    @classmethod
    def from_options(cls, options: TimeSeriesOptions) -> TimeSeriesJob:
        """Validates every option, the input files and the labels file.

        Raises:
            ValueError: naming the flag (or file) at fault.
        """
        common.require(options, "input", "window_size")
        if options.append:
            raise ValueError("--append adds images to an image dataset; a time-series "
                             "dataset is rebuilt (--overwrite): new rows change its "
                             "series' windows, gaps and splits (docs/RESUME_AND_APPEND.md).")
        if options.split_times and options.split_fractions is not None:
            raise ValueError(f"--split_times={options.split_times} and --split_fractions="
                             f"{options.split_fractions} both set the splits: pass one of "
                             f"them.")
        output = common.OutputSettings.from_options(options, default_name="timeseries")
        if options.value_columns is not None and options.target_columns:
            raise ValueError(f"--value_columns={options.value_columns} and --target_columns="
                             f"{options.target_columns} both name the columns to predict: "
                             f"pass one of them.")
        values = column_names(arguments.DEFAULT_VALUE_COLUMN
                              if options.value_columns is None else options.value_columns)
        if not values:
            raise ValueError("--value_columns names no column.")
        roles = column_roles(options, values)
        columns = Columns(options.series_id_column, options.timestamp_column, roles.reals,
                          roles.categoricals, options.timestamp_format or None,
                          value_flags=tuple(roles.named_columns().items()))
        max_line_bytes = common.mib_to_bytes(options.max_line_mb)
        if not 0 < max_line_bytes <= ranges.MAX_LINE_BYTES_LIMIT:
            raise ValueError(f"--max_line_mb must be above 0 and at most "
                             f"{ranges.MAX_LINE_BYTES_LIMIT // 2**20}, got "
                             f"{options.max_line_mb:g}.")
        input_plan = InputPlan.from_pattern(options.input, columns,
                                            max_line_bytes=max_line_bytes)
        first_chunk.check_first_chunks(input_plan, columns)
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
        return cls(
            input_plan=input_plan,
            columns=columns,
            labels=tuple(sorted(labels.items())),
            label_rejections=tuple(label_rejections),
            windowing=ts_series.Windowing(options.window_size, options.shift,
                                          options.stride, horizon),
            cleaning=ts_series.Cleaning(options.duplicates, options.missing,
                                        _parse_max_gap(options.max_gap)),
            time_split=time_split(options, split_by, output.fractions),
            preprocessing=ts_preprocessing.SeriesPreprocessing(
                window_size=options.window_size, horizon=horizon,
                num_features=len(roles.reals), classification=classification,
                per_series=options.normalize == "per_series", roles=roles,
                class_order=options.class_order or contract.CLASS_ORDER_NAME),
            output=output,
        )

    def describe(self) -> dict[str, Any]:
        """The manifest's "preprocessing" entry."""
        return {
            **summary.describe_preprocessing(self.columns, self.windowing, self.cleaning,
                                             self.time_split, self.preprocessing.per_series),
            **self.preprocessing.describe_roles(),
            "class_order": (self.preprocessing.class_order
                            if self.preprocessing.classification else None),
            **self.output.describe(),
        }

    @property
    def settings(self) -> SeriesSettings:
        """What the series step needs."""
        return SeriesSettings(
            windowing=self.windowing, cleaning=self.cleaning, time_split=self.time_split,
            schema=self.preprocessing.window_schema(),
            spill_dir=posixpath.join(self.output.tft_temp_dir, "series"),
            roles=self.preprocessing.roles, statistics=self.output.statistics)

    @property
    def summary(self) -> summary.WindowSummary:
        """What the manifest's "timeseries" entry reports next to the counts."""
        return summary.WindowSummary(self.columns.values, self.windowing, self.time_split)


def _analyze(job: TimeSeriesJob) -> AnalyzeAndWriteTransformFn:
    config = job.preprocessing
    return AnalyzeAndWriteTransformFn(
        functools.partial(ts_preprocessing.preprocessing_fn, config=config),
        config.raw_feature_spec(), job.output.output_dir, job.output.tft_temp_dir,
        serving_feature_spec=config.serving_feature_spec())


def build_pipeline(pipeline: beam.Pipeline, job: TimeSeriesJob) -> None:
    """Adds the time-series job's transforms to ``pipeline``.

    Rows are read and validated column-wise into chunks spilled by bucket of series,
    then cleaned and split a bucket at a time; only small records cross a stage
    boundary: chunk references, window runs, counts, one analysis instance per
    series. Each shard's windows are cut, normalised by the exported
    ``transform_fn`` and written inside one step, in the publishing tail both jobs
    end with (``etl/core/publishing/tail.py``).
    """
    output_dir, plan = job.output.output_dir, job.input_plan
    read = pipeline | "ReadSeriesChunks" >> ReadSeriesChunks(
        plan, job.columns, posixpath.join(job.output.tft_temp_dir, "rows"))
    labels = beam.pvalue.AsDict(pipeline | "LabelsBySeries" >> beam.Create(job.labels))
    processed = (
        read.chunks
        # (bucket, [ChunkRef]): where every row of each series of the bucket waits.
        | "GroupByBucket" >> beam.GroupByKey()
        | "ProcessSeries" >> beam.ParDo(
            ProcessSeriesBucket(job.settings, plan.files, plan.fmt),
            labels=labels).with_outputs(dead_letters.REJECTED, STATS, LONGEST, ANALYSIS,
                                        buckets.STATISTICS, main="runs")
    )
    transform_dir = processed[ANALYSIS] | "AnalyzeTrainSeries" >> _analyze(job)
    parse_rejected = singletons.combined(read[dead_letters.REJECTED], "CountParseRejections",
                                         beam.combiners.CountCombineFn())
    # Input rows: every parsed row plus every line rejected while parsing.
    inputs = ((read[ROW_COUNTS],
               read[dead_letters.REJECTED] | "CountRejectedLines" >> beam.Map(count_one))
              | "FlattenInputCounts" >> beam.Flatten()
              | "InputsEntry" >> InputsEntry())
    timeseries_entry = (processed[STATS], processed[LONGEST]) | "SummariseWindows" >> (
        summary.SummariseWindows(job.summary, parse_rejected))
    # {"normalisation": ...}: the statistics the analysis fits, from the same moments.
    normalisation_entry = processed[ANALYSIS] | "DescribeNormalisation" >> (
        ts_preprocessing.DescribeNormalisation(job.preprocessing))
    extras = [timeseries_entry, inputs, normalisation_entry]
    roles = job.preprocessing.roles
    if job.preprocessing.covariates and roles.categoricals:
        # {"categories": ...}: each vocabulary's size and the ids it gives.
        extras.append(transform_dir | "DescribeCategories" >> beam.Map(
            categories.describe_categories, roles=roles))
    # WindowRun: consecutive windows of a piece of a series, kept whole in one shard.
    _ = processed.runs | "Publish" >> PublishDataset(PublishSpec(
        output_dir, job.output.name,
        plan=PlanRunShards(target_shard_bytes=job.output.target_shard_bytes,
                           num_shards=job.output.num_shards),
        write_shard=TransformAndWriteWindowShard(
            output_dir, job.output.name, job.output.shard_format, job.preprocessing,
            job.windowing, shared.Shared()),
        write_label="WindowTransformAndWrite",
        rejected=(read[dead_letters.REJECTED], processed[dead_letters.REJECTED],
                  pipeline | "LabelFileRejections" >> beam.Create(job.label_rejections)),
        transform_dir=transform_dir,
        extras=tuple(extras),
        # The rows shape the windows: every input file's size and mtime, and the
        # labels read from the labels file, identify them for a resumed run.
        inputs={"files": [list(stat) for stat in plan.file_stats],
                "labels": [list(pair) for pair in job.labels]},
        manifest=ManifestSpec(
            kind=contract.TIMESERIES, task=CLASSIFICATION if job.classification else FORECAST,
            preprocessing=job.describe(),
            check=functools.partial(accounting.check_timeseries,
                                    max_error_fraction=job.output.max_error_fraction)),
        version=job.version,
        # {"statistics": ...}: the rows' and series' statistics the series step summed.
        statistics=stats_step.WriteStatisticsOf(processed[buckets.STATISTICS], output_dir,
                                                job.version)
        if job.output.statistics else None, report=job.output.statistics))


def run(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Runs the time-series job and returns the manifest it wrote.

    Raises:
        ValueError: for invalid options or inputs, before anything runs.
    """
    return common.run_job(argv, TimeSeriesOptions, TimeSeriesJob.from_options,
                          build_pipeline, adjust_options=remove_labels_files_from_job_labels)

