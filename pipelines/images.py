"""Image job: a labelled image folder or manifest → sharded GZIP TFRecords + manifest.

Usage::

    python -m pipelines.images --input=<folder | manifest.csv | manifest.jsonl> \\
        --output_dir=<dir> [--image_size=224 --image_format=jpeg ...] [Beam flags]

``--help`` lists the job's own flags, ``--help_beam`` Beam's: any standard Beam flag is
accepted (``--runner``, ``--direct_num_workers``, ``--direct_running_mode``,
Dataflow's ``--project`` ...). Without ``--runner`` the
job runs locally and offline on Beam's FnApiRunner (the DirectRunner's batch engine).
"""

from __future__ import annotations

if __name__ == "__main__":
    # ``python -m pipelines.images`` runs this file as ``__main__``: it prints --help
    # before importing anything heavy, or runs the job of the imported module, and
    # stops before defining anything here: the steps then pickle by reference to
    # ``pipelines.images``, which workers import from the installed package, and
    # nothing is pickled by value from ``__main__`` (nor is any options class defined
    # twice).
    from pipelines.command import run_job_command

    run_job_command("images")
else:
    # Imported (by the command above, a worker, a test): TensorFlow, which the imports
    # below load, starts without its start-up lines (pipelines/quiet_start.py).
    from pipelines.quiet_start import import_tensorflow_quietly

    import_tensorflow_quietly()

import dataclasses
import functools
from collections.abc import Iterator, Sequence
from typing import Any

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions, SetupOptions
from apache_beam.utils import shared

from etl.core import dead_letters
from etl.core.column_hints import column_names
from etl.core.dead_letters import REJECTED, Rejection
from etl.core.io import storage
from etl.core.publishing.inputs import InputsEntry, count_one
from etl.core.publishing.tail import ManifestSpec, PublishDataset, PublishSpec
from etl.core.run import versions
from etl.core.shards import splits
from etl.core.transform import analysis
from etl.core.transform.analysis import AnalyzeAndWriteTransformFn
from etl.images import accounting, loading
from etl.images import labels as image_labels
from etl.images import preprocessing as image_preprocessing
from etl.images.duplicates.search import REPORT_DUPLICATES, DuplicateSettings, FindDuplicates
from etl.images.label_entries import DescribeTargetsAndCarried
from etl.images.shard_plan import PlanImageShards
from etl.images.shards import TransformAndWriteImageShard, default_gzip_level
from etl.images.sources import ImageRecord, ReadImageRecords, assign_split, check_input
from etl.images.stats import WriteImageStatistics
from pipelines import arguments, common
from reader.format import contract

# The module every SDK harness of this job imports as it starts (Beam's --beam_plugins).
WORKER_START = "pipelines.worker_start"


class ImagesOptions(common.DatasetOptions, PipelineOptions):
    """Options of the image job. --input: an image folder (<root>/<class>/<image> or
    <root>/<split>/<class>/<image>) or a manifest .csv/.jsonl with columns
    path,label[,split] (paths relative to the manifest's folder), and the label-set,
    target and carried columns the flags name (docs/LABELS.md)."""

    JOB = arguments.IMAGES

    @classmethod
    def _add_argparse_args(cls, parser: Any) -> None:
        arguments.add_image_flags(parser)


def _parse_rgb(value: str | None) -> tuple[int, int, int] | None:
    """``--alpha_background``'s ``"R,G,B"`` → a colour (None stays None).

    Raises:
        ValueError: naming the flag, for anything but three integers 0-255.
    """
    if value is None:
        return None
    parts = [part.strip() for part in value.split(",")]
    if len(parts) != 3 or not all(part.isdigit() and int(part) <= 255 for part in parts):
        raise ValueError(f"--alpha_background must be R,G,B with integers 0-255 "
                         f"(e.g. 255,255,255), got {value!r}.")
    red, green, blue = (int(part) for part in parts)
    return red, green, blue


@dataclasses.dataclass(frozen=True)
class ImageJob:
    """The image job's validated settings (built from ``ImagesOptions``)."""

    input: str
    preprocessing: image_preprocessing.ImagePreprocessing
    output: common.OutputSettings
    limits: loading.InputLimits
    allowed_labels: frozenset[str] | None
    allow_outside_root: bool
    columns: image_labels.LabelColumns = image_labels.ONE_CLASS
    duplicates: DuplicateSettings = REPORT_DUPLICATES
    # A folder input's layout (check_input): splits as top-level folders or not.
    split_layout: bool | None = None
    # The version this run publishes: the first, or (--append) the next one.
    version: versions.DatasetVersion = versions.FIRST_VERSION
    # Seconds a file's read may take before it is given up (None: no limit).
    read_timeout_s: float | None = None

    @classmethod
    def from_options(cls, options: ImagesOptions) -> ImageJob:
        """Validates every option and the input's layout; nothing is written.

        Raises:
            ValueError: naming the flag (or input) at fault.
        """
        common.require(options, "input")
        output = common.OutputSettings.from_options(
            options, default_name="images",
            default_gzip_level=default_gzip_level(options.image_format, options.image_size))
        columns = _label_columns(options)
        split_layout = check_input(options.input, columns)
        job = cls(
            input=options.input,
            preprocessing=image_preprocessing.ImagePreprocessing(
                image_size=options.image_size, image_format=options.image_format,
                jpeg_quality=options.jpeg_quality,
                apply_exif_orientation=not options.ignore_exif_orientation,
                alpha_background=_parse_rgb(options.alpha_background)),
            output=output,
            limits=loading.InputLimits(
                max_file_bytes=common.mib_to_bytes(options.max_file_mb),
                max_image_pixels=options.max_image_pixels,
                strict_decoding=not options.lenient_decoding,
                decode_budget_bytes=common.mib_to_bytes(options.decode_budget_mb)),
            allowed_labels=_read_vocabulary(options.label_vocabulary),
            allow_outside_root=options.allow_paths_outside_root,
            columns=columns,
            duplicates=DuplicateSettings(options.cross_split_duplicates,
                                         options.near_duplicate_distance),
            split_layout=split_layout,
            read_timeout_s=_read_timeout(options.read_timeout_s),
        )
        if not options.append:
            return job
        if options.overwrite:
            raise ValueError("--append adds to the dataset in --output_dir and "
                             "--overwrite replaces it: pass one of them.")
        job = _keep_class_order(job, options.class_order)
        return dataclasses.replace(job, version=versions.DatasetVersion.appending_to(
            output.output_dir, contract.IMAGES, output.name, job.describe_preprocessing()))

    def describe_preprocessing(self) -> dict[str, Any]:
        """Every parameter that shapes the output, for the manifest."""
        return {
            **self.preprocessing.describe(),
            "split_fractions": self.output.fractions.as_dict(),
            "split_rule": "explicit split folder/column, else sha256-based hash of the key",
            **self.output.describe(),
            "max_image_pixels": self.limits.max_image_pixels,
            "max_file_bytes": self.limits.max_file_bytes,
            "strict_decoding": self.limits.strict_decoding,
            "damaged_data": (
                "rejected (corrupt_image_data): JPEGs libjpeg-turbo decodes only with "
                "warnings (strict decode at 1/8 scale), GIFs Pillow cannot decode"
                if self.limits.strict_decoding
                else "stored as TensorFlow decodes it (--lenient_decoding)"),
            "label_vocabulary": sorted(self.allowed_labels) if self.allowed_labels else None,
            "labels": self.columns.describe(),
            **self.duplicates.describe(),
            "max_error_fraction": self.output.max_error_fraction,
        }


def _read_timeout(seconds: float) -> float | None:
    """``--read_timeout_s`` → the read time limit (0: none).

    Raises:
        ValueError: if it is negative.
    """
    if seconds < 0:
        raise ValueError(f"--read_timeout_s must be >= 0 (0: no limit), got {seconds}.")
    return seconds or None


def _label_columns(options: ImagesOptions) -> image_labels.LabelColumns:
    """The label, target and carried columns the flags name.

    Raises:
        ValueError: naming the flag at fault.
    """
    label_column = options.label_column.strip()
    return image_labels.LabelColumns(
        label_column=None if label_column == image_labels.NO_LABEL else label_column,
        multi_label=options.multi_label, label_separator=options.label_separator,
        require_label=options.require_label,
        target_columns=column_names(options.target_columns),
        normalize_targets=options.normalize_targets == "zscore",
        carry_columns=column_names(options.carry_columns),
        class_order=options.class_order or contract.CLASS_ORDER_NAME)


def _keep_class_order(job: ImageJob, requested: str | None) -> ImageJob:
    """``--append``: the job numbering classes as the dataset does, whose
    ``transform_fn`` maps the new images' labels to its ids.

    Raises:
        ValueError: if ``--class_order`` asks for another order than the dataset's.
    """
    manifest_path = storage.join(job.output.output_dir, contract.MANIFEST_FILENAME)
    if job.columns.label_column is None or not storage.exists(manifest_path):
        return job  # No class ids to keep, or no dataset (appending_to says so).
    labels = versions.read_manifest(job.output.output_dir)["preprocessing"].get("labels")
    # A dataset from before --class_order numbered its classes by frequency.
    held = (labels or {}).get("class_order") or contract.CLASS_ORDER_FREQUENCY
    if requested is not None and requested != held:
        raise ValueError(
            f"--append keeps the dataset's class ids, numbered by {held} (its manifest's "
            f"preprocessing.labels.class_order); --class_order={requested} would renumber "
            f"them. Drop --class_order, or rebuild with --overwrite "
            f"--class_order={requested}.")
    return dataclasses.replace(job, columns=dataclasses.replace(job.columns,
                                                                class_order=held))


def _read_vocabulary(path: str | None) -> frozenset[str] | None:
    """The allowed labels from a one-label-per-line file (blank lines ignored)."""
    if path is None:
        return None
    if not storage.exists(path):
        raise ValueError(f"--label_vocabulary {path!r} does not exist.")
    labels = frozenset(line.strip() for line in storage.read_text(path).splitlines()
                       if line.strip())
    if not labels:
        raise ValueError(f"--label_vocabulary {path!r} lists no label.")
    return labels


def _train_instances(record: ImageRecord, columns: image_labels.LabelColumns
                     ) -> Iterator[dict[str, Any]]:
    if record.split == contract.TRAIN:
        yield image_preprocessing.analysis_instance(record, columns)


def decide_split(record: ImageRecord, fractions: splits.SplitFractions,
                 allowed_labels: frozenset[str] | None) -> Iterator[Any]:
    """The record with its split set, or its ``unknown_label`` rejection (tagged)."""
    return dead_letters.route(assign_split(record, fractions, allowed_labels))


def _analyze_labels(job: ImageJob) -> AnalyzeAndWriteTransformFn:
    """The analysis of the train labels; it must read no image bytes.

    Raises:
        AssertionError: if the preprocessing's analyzers would read image bytes.
    """
    preprocessing_fn = functools.partial(image_preprocessing.preprocessing_fn,
                                         config=job.preprocessing, columns=job.columns)
    analyze = AnalyzeAndWriteTransformFn(
        preprocessing_fn, image_preprocessing.raw_feature_spec(job.columns),
        job.output.output_dir, job.output.tft_temp_dir,
        serving_feature_spec=image_preprocessing.serving_feature_spec(job.columns))
    if contract.RAW_IMAGE_KEY in analyze.analyze_columns:
        raise AssertionError(
            f"The image analyzers must not read {contract.RAW_IMAGE_KEY!r} (image bytes "
            f"never enter the analysis); they read {analyze.analyze_columns}.")
    return analyze


class AnalyzeTrainImages(beam.PTransform):
    """Split-assigned ``ImageRecord``s → ``(transform_dir, *manifest entries)``.

    The train records' analysis instances (label, target moments; never image
    bytes) fit tf.Transform's analyzers, which write ``transform_fn/``; the same
    instances give the manifest's ``targets`` and ``carried_columns`` entries
    (``etl/images/label_entries.py``), so the recorded statistics are the applied ones.

    Raises:
        AssertionError: at construction, if the analyzers would read image bytes.
    """

    def __init__(self, job: ImageJob) -> None:
        super().__init__()
        self._columns = job.columns
        self._analyze = _analyze_labels(job)

    def expand(self, split_records: beam.PCollection) -> tuple[beam.PCollection, ...]:
        train_instances = split_records | "TrainInstances" >> beam.FlatMap(
            _train_instances, columns=self._columns)
        transform_dir = train_instances | "AnalyzeAndWrite" >> self._analyze
        entries = train_instances | "DescribeTargets" >> DescribeTargetsAndCarried(
            self._columns)
        return (transform_dir, *entries)


def reject_labels_not_in_dataset(record: ImageRecord, vocabulary: frozenset[str],
                                 version: int) -> Iterator[Any]:
    """``--append``: the record, or (tagged) its ``label_not_in_dataset`` rejection
    when it names a class the dataset's vocabulary lacks: the shards already written
    hold ids of that vocabulary, so a new class needs a rebuild."""
    missing = image_labels.names_not_in(record.label, vocabulary)
    if not missing:
        return iter([record])
    return dead_letters.route(Rejection(
        key=record.key, source=record.source, reason=dead_letters.LABEL_NOT_IN_DATASET,
        message=f"Label {', '.join(map(repr, missing))} is not in the dataset's label "
                f"vocabulary (fit by its first version); --append cannot add a class "
                f"to dataset version {version - 1}: rebuild it with --overwrite to "
                f"include it."))


def _list_inputs(pipeline: beam.Pipeline, job: ImageJob
                 ) -> tuple[beam.PCollection, beam.PCollection]:
    """``(records, rejections)`` of the listing: every input, or (``--append``) the
    inputs the dataset does not hold yet, a class it lacks rejected."""
    records, rejected = pipeline | "ReadImageRecords" >> ReadImageRecords(
        job.input, job.allow_outside_root, job.columns, job.split_layout)
    if not job.version.appends:
        return records, rejected
    held = [storage.join(job.output.output_dir, relpath)
            for relpath in job.version.held_key_files()]
    records = records | "DropHeldRecords" >> beam.ParDo(versions.DropHeldInputs(held))
    rejected = rejected | "DropHeldRejections" >> beam.ParDo(versions.DropHeldInputs(held))
    if job.columns.label_column is None:
        return records, rejected
    checked = records | "RejectNewLabels" >> beam.FlatMap(
        reject_labels_not_in_dataset,
        vocabulary=frozenset(job.version.previous["label_vocab"]),
        version=job.version.number).with_outputs(REJECTED, main="records")
    return checked.records, ((rejected, checked[REJECTED])
                             | "FlattenNewLabelRejections" >> beam.Flatten())


def _existing_transform(pipeline: beam.Pipeline, job: ImageJob) -> beam.PCollection:
    """``--append``: the dataset's transform output, copied where TensorFlow loads it
    (``analysis.stage_transform_output``); a single element, that folder."""
    return (pipeline
            | "StartStagingTransformFn" >> beam.Create([None])
            | "StageTransformFn" >> beam.Map(
                analysis.stage_transform_output, output_dir=job.output.output_dir,
                staged=analysis.staging_dir(job.output.tft_temp_dir)))


def build_pipeline(pipeline: beam.Pipeline, job: ImageJob) -> None:
    """Adds the image job's transforms to ``pipeline``.

    Only small records cross a stage boundary: listing, split assignment, the label
    vocabulary (fit on the train split's labels alone) and the shard plan all work
    on ``ImageRecord``s; each shard's images are read, transformed by the exported
    ``transform_fn`` and written inside one step (``etl/images/shards.py``), in the
    publishing tail both jobs end with (``etl/core/publishing/tail.py``).

    Raises:
        AssertionError: if the preprocessing's analyzers would read image bytes.
    """
    output_dir = job.output.output_dir
    records, listing_rejected = _list_inputs(pipeline, job)
    # Every listed input is a record or a listing rejection: that count is the inputs.
    inputs = (
        (records, listing_rejected)
        | "FlattenListed" >> beam.Flatten()
        | "CountInputs" >> beam.Map(count_one)
        | "InputsEntry" >> InputsEntry()
    )
    # ImageRecord with its split set, from here to its shard.
    decided = records | "AssignSplits" >> beam.FlatMap(
        decide_split, fractions=job.output.fractions,
        allowed_labels=job.allowed_labels).with_outputs(REJECTED, main="records")
    split_records = decided.records
    if job.version.appends:
        # No analysis: the dataset's transform_fn (vocabulary, statistics) maps the
        # new images, and its manifest entries stay.
        transform_dir, entries = _existing_transform(pipeline, job), []
    else:
        transform_dir, *entries = split_records | "AnalyzeLabels" >> AnalyzeTrainImages(
            job)
    extras = (inputs, *entries)

    _ = split_records | "Publish" >> PublishDataset(PublishSpec(
        output_dir, job.output.name,
        plan=PlanImageShards(job.preprocessing, job.limits,
                             target_shard_bytes=job.output.target_shard_bytes,
                             num_shards=job.output.num_shards),
        write_shard=TransformAndWriteImageShard(
            output_dir, versions.shard_prefix(job.output.name, job.version.number),
            job.output.shard_format,
            job.limits, shared.Shared(), job.preprocessing, columns=job.columns,
            hash_images=job.duplicates.enabled, statistics=job.output.statistics,
            read_timeout_s=job.read_timeout_s),
        write_label="TransformAndWrite",
        rejected=(listing_rejected, decided[REJECTED]),
        transform_dir=transform_dir, extras=extras,
        manifest=ManifestSpec(
            kind=contract.IMAGES, task=job.columns.task,
            preprocessing=job.describe_preprocessing(),
            check=functools.partial(accounting.check_images,
                                    max_error_fraction=job.output.max_error_fraction)),
        version=job.version, key_index=True,
        screen=FindDuplicates(output_dir, job.duplicates, job.version,
                              multi_label=job.columns.multi_label)
        if job.duplicates.enabled else None,
        statistics=WriteImageStatistics(output_dir, job.version, job.columns)
        if job.output.statistics else None, report=job.output.statistics))


def start_workers_as_this_process(options: PipelineOptions) -> None:
    """Names ``pipelines.worker_start`` among Beam's ``--beam_plugins``: every SDK
    harness imports it as it starts, and so runs TensorFlow's ops as this process
    does, wherever it runs."""
    setup = options.view_as(SetupOptions)
    setup.beam_plugins = [*(setup.beam_plugins or []), WORKER_START]


def run(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Runs the image job and returns the manifest it wrote.

    Raises:
        ValueError: for invalid options or input layouts, before anything runs.
    """
    # Imported here, not at the top: importing it sets the variable, which a test
    # process or notebook that only imports this module should not get.
    from pipelines import worker_start

    worker_start.run_ops_on_one_thread_each()
    return common.run_job(argv, ImagesOptions, ImageJob.from_options, build_pipeline,
                          adjust_options=start_workers_as_this_process)

