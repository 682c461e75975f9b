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

import dataclasses
import functools
import posixpath
from collections.abc import Sequence
from typing import Any

import apache_beam as beam
from apache_beam.options.pipeline_options import GoogleCloudOptions, PipelineOptions
from apache_beam.utils import shared

from etl.core import dead_letters, describe, singletons, versions
from etl.core.analysis import AnalyzeAndWriteTransformFn
from etl.core.dead_letters import Rejection
from etl.core.inputs import InputsEntry, count_one
from etl.core.publish import ManifestSpec, PublishDataset
from etl.timeseries import accounting, buckets, calendar, categories, ranges, summary
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
from etl.timeseries.read import ROW_COUNTS, InputPlan, ReadSeriesChunks
from etl.timeseries.runs import PlanRunShards
from etl.timeseries.shards import TransformAndWriteWindowShard
from etl.timeseries.sources import Columns, parse_timestamp, read_labels
from pipelines import common
from reader import contract
from reader.contract import CLASSIFICATION, FORECAST

if __name__ == "__main__":
    # ``python -m pipelines.timeseries`` runs this file as ``__main__``. It runs the job of
    # the imported module instead, and stops before defining anything here: the
    # steps then pickle by reference to ``pipelines.timeseries``, which workers import
    # from the installed package, and nothing is pickled by value from ``__main__``
    # (nor is any options class defined twice).
    from pipelines import timeseries as _job
    from pipelines.command import run_command

    run_command(_job.run)

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
        parser.add_argument("--series_labels",
                            help="Optional .csv/.jsonl mapping series id → label (also "
                                 "accepted as --labels=<file>): classify windows by their "
                                 "series' label instead of forecasting.")
        parser.add_argument("--window_size", type=int,
                            help="Rows per window (required).")
        parser.add_argument("--shift", type=int, default=1,
                            help="Rows between the starts of consecutive windows.")
        parser.add_argument("--stride", type=int, default=1,
                            help="Rows between consecutive elements of a window.")
        parser.add_argument("--horizon", type=int,
                            help="Target rows after the window (same stride). Default 1; "
                                 "must be 0 with --labels.")
        parser.add_argument("--split_by", choices=ts_series.SPLIT_MODES,
                            help="time (default without --labels): by time within each "
                                 "series; series (default with --labels): whole series "
                                 "by a hash of the id.")
        parser.add_argument("--split_times",
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
        # Column roles (docs/TIMESERIES_JOB.md, "Covariates"); any of them switches to
        # the covariate layout (known, static_real, target_scale).
        parser.add_argument("--past_columns",
                            help="Observed real covariates: in the window only.")
        parser.add_argument("--known_columns",
                            help="Real covariates known in advance: over the window and "
                                 "the horizon (a missing one cuts the series there).")
        parser.add_argument("--static_real_columns",
                            help="Real columns constant per series: once per window.")
        parser.add_argument("--known_categorical_columns",
                            help="Categorical covariates known in advance (events, "
                                 "holidays): vocabulary ids over the window and the "
                                 "horizon.")
        parser.add_argument("--static_categorical_columns",
                            help="Categorical columns constant per series (store, item): "
                                 "vocabulary ids, once per window.")
        parser.add_argument("--calendar_features",
                            help="Known features from the timestamps: any of "
                                 + ",".join(calendar.FEATURES) + ".")
        parser.add_argument("--target_transform", choices=roles_lib.TARGET_TRANSFORMS,
                            help="Applied to the targets before scaling (default none).")
        common.add_mib_argument(
            parser, "--max_line_mb", ranges.DEFAULT_MAX_LINE_BYTES,
            "Longest CSV or JSON Lines line read, in MiB (at most "
            f"{ranges.MAX_LINE_BYTES_LIMIT // 2**20}); a longer one stops the job, "
            "naming it. Default %(default)s.")


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
    (and the layout is today's).

    Raises:
        ValueError: a column given two roles, an unknown calendar feature or transform.
    """
    given = any(getattr(options, flag) for flag in _ROLE_FLAGS)
    names = roles_lib.split_names
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
        target_transform=options.target_transform or "none", given=given)


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
        output = common.OutputSettings.from_options(options, default_name="timeseries")
        values = tuple(v.strip() for v in options.value_columns.split(",") if v.strip())
        if not values:
            raise ValueError("--value_columns names no column.")
        roles = column_roles(options, values)
        columns = Columns(options.series_id_column, options.timestamp_column, roles.reals,
                          roles.categoricals)
        max_line_bytes = common.mib_to_bytes(options.max_line_mb)
        if not 0 < max_line_bytes <= ranges.MAX_LINE_BYTES_LIMIT:
            raise ValueError(f"--max_line_mb must be above 0 and at most "
                             f"{ranges.MAX_LINE_BYTES_LIMIT // 2**20}, got "
                             f"{options.max_line_mb:g}.")
        input_plan = InputPlan.from_pattern(options.input, columns,
                                            max_line_bytes=max_line_bytes)
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
            input_plan=input_plan,
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
                num_features=len(roles.reals), classification=classification,
                per_series=options.normalize == "per_series", roles=roles),
            output=output,
        )

    def describe(self) -> dict[str, Any]:
        """The manifest's "preprocessing" entry."""
        return {
            **summary.describe_preprocessing(self.columns, self.windowing, self.cleaning,
                                             self.time_split, self.preprocessing.per_series),
            **self.preprocessing.describe_roles(),
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
    end with (``etl/core/publish.py``).
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
    if job.output.statistics:  # {"statistics": ...}: the rows' and series' statistics
        extras.append(processed[buckets.STATISTICS] | "DescribeRowsAndSeries" >> (
            describe.WriteStatistics(output_dir, versions.FIRST_VERSION)))
    # WindowRun: consecutive windows of a piece of a series, kept whole in one shard.
    _ = processed.runs | "Publish" >> PublishDataset(
        output_dir, job.output.name,
        plan=PlanRunShards(target_shard_bytes=job.output.target_shard_bytes,
                           num_shards=job.output.num_shards),
        write_shard=TransformAndWriteWindowShard(
            output_dir, job.output.name, job.output.shard_format, job.preprocessing,
            job.windowing, shared.Shared()),
        write_label="WindowTransformAndWrite",
        rejected=[read[dead_letters.REJECTED], processed[dead_letters.REJECTED],
                  pipeline | "LabelFileRejections" >> beam.Create(job.label_rejections)],
        transform_dir=transform_dir,
        extras=extras,
        # The rows shape the windows: every input file's size and mtime, and the
        # labels read from the labels file, identify them for a resumed run.
        inputs={"files": [list(stat) for stat in plan.file_stats],
                "labels": [list(pair) for pair in job.labels]},
        manifest=ManifestSpec(
            kind=contract.TIMESERIES, task=CLASSIFICATION if job.classification else FORECAST,
            preprocessing=job.describe(),
            check=functools.partial(accounting.check_timeseries,
                                    max_error_fraction=job.output.max_error_fraction)),
        report=job.output.statistics)


def run(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Runs the time-series job and returns the manifest it wrote.

    Raises:
        ValueError: for invalid options or inputs, before anything runs.
    """
    return common.run_job(argv, TimeSeriesOptions, TimeSeriesJob.from_options,
                          build_pipeline, adjust_options=remove_labels_files_from_job_labels)

