"""Each job's own flags, in the groups ``--help`` shows, declared without Beam or TensorFlow.

Beam parses a job's flags with one parser built from every ``PipelineOptions``
subclass loaded in the process, so the flags both jobs take are declared once
(``common.DatasetOptions``) and each job's options class adds its own; all of them
come from the functions here. ``--help`` builds a parser of one job's flags alone,
with that job's help texts and every default shown, and prints it before the job
module (Beam, TensorFlow) is imported: ``python -m pipelines.images --help`` answers
in a fraction of a second. ``--help_beam`` prints Beam's own flags (``--runner`` ...),
which every job accepts beside its own.

Example::

    python -m pipelines.timeseries --help        # this job's flags, grouped
    python -m pipelines.timeseries --help_beam   # Beam's runner flags
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any, NoReturn

from etl.images.duplicates.groups import DEFAULT_NEAR_DISTANCE
from etl.timeseries.calendar import FEATURES as CALENDAR_FEATURES
from etl.timeseries.roles import TARGET_TRANSFORMS
from reader.format import contract

IMAGES = "images"
TIMESERIES = "timeseries"
JOBS = (IMAGES, TIMESERIES)
HELP_BEAM = "--help_beam"
_HELP_FLAGS = frozenset({"-h", "--help", HELP_BEAM})

# The groups --help shows, in this order.
INPUT = "input"
COLUMNS = "labels and columns"
SPLITS = "splits"
PREPROCESSING = "preprocessing"
OUTPUT = "output"
STATISTICS = "statistics"
GROUPS = (INPUT, COLUMNS, SPLITS, PREPROCESSING, OUTPUT, STATISTICS)

# Defaults the library defines too (tests/pipelines/test_arguments.py checks they
# agree); restated here because the modules defining them import Beam or TensorFlow.
MIB = 1024 * 1024
DEFAULT_SPLIT_FRACTIONS = "0.8,0.1,0.1"  # etl.core.shards.splits.SplitFractions()
DEFAULT_VALUE_COLUMN = "value"  # the time-series job's --value_columns
DEFAULT_TARGET_SHARD_BYTES = 128 * MIB  # etl.core.shards.placement
DEFAULT_MAX_ERROR_FRACTION = 0.1  # etl.core.publishing.accounting
DEFAULT_MAX_FILE_BYTES = 64 * MIB  # etl.images.loading
DEFAULT_MAX_IMAGE_PIXELS = 64 * MIB  # etl.images.loading
DEFAULT_DECODE_BUDGET_BYTES = 1024 * MIB  # etl.images.loading
DEFAULT_LABEL_SEPARATOR = "|"  # etl.images.labels
DEFAULT_MAX_LINE_BYTES = 64 * MIB  # etl.timeseries.rows.ranges
MAX_LINE_BYTES_LIMIT = 1024 * MIB  # etl.timeseries.rows.ranges
SPLIT_MODES = ("time", "series")  # etl.timeseries.series
DUPLICATE_POLICIES = ("mean", "reject")  # etl.timeseries.series
MISSING_POLICIES = ("drop", "ffill", "interpolate", "reject")  # etl.timeseries.series
# --read_timeout_s's default: an image file (at most --max_file_mb) read in five
# minutes is read at over 200 KiB/s; slower, its mount or device has stalled.
DEFAULT_READ_TIMEOUT_S = 300.0

_USAGE = {
    IMAGES: "%(prog)s --input=<folder | manifest.csv | manifest.jsonl> --output_dir=<dir> "
            "[flags below] [Beam flags: --help_beam]",
    TIMESERIES: "%(prog)s --input=<csv | jsonl | parquet file or glob> --output_dir=<dir> "
                "--window_size=<rows> [flags below] [Beam flags: --help_beam]",
}
_DESCRIPTION = {
    IMAGES: "Image job: a labelled image folder or manifest -> sharded TFRecords, "
            "transform_fn/ and manifest.json (docs/IMAGE_JOB.md).",
    TIMESERIES: "Time-series job: long-format series -> normalised sliding windows as "
                "sharded TFRecords, transform_fn/ and manifest.json "
                "(docs/TIMESERIES_JOB.md).",
}
_EPILOG = ("Any Beam flag is accepted too (--runner, --direct_num_workers, "
           "--direct_running_mode, Dataflow's --project ...): --help_beam lists them. "
           "Without --runner the job runs locally and offline.")


def _group(parser: Any, title: str) -> Any:
    """``parser``'s argument group ``title``, made on first use."""
    for group in parser._action_groups:
        if group.title == title:
            return group
    return parser.add_argument_group(title)


def add_mib_argument(parser: Any, flag: str, default_bytes: int, help_text: str) -> None:
    """Adds a size flag given in MiB whose default is a byte count; read it back in
    bytes with ``common.mib_to_bytes``."""
    parser.add_argument(flag, type=float, default=default_bytes / MIB, help=help_text)


def _for_job(job: str | None, **texts: str) -> str:
    """The help text of a flag both jobs take, for ``job`` (None: Beam's shared parser,
    whose help nobody prints, gets the image job's)."""
    return texts[job or IMAGES]


def add_shared_flags(parser: Any, job: str | None = None) -> None:
    """The flags every job takes, each with ``job``'s help (``--append``: images only in
    a job's help; Beam's shared parser, ``job`` None, takes it for both)."""
    _group(parser, INPUT).add_argument(
        "--input",
        help=_for_job(
            job,
            images="An image folder (<root>/<class>/<image> or "
                   "<root>/<split>/<class>/<image>) or a .csv/.jsonl manifest with columns "
                   "path,label[,split] (paths relative to it; label sets, numeric targets "
                   "and carried columns: docs/LABELS.md). Required.",
            timeseries="A .csv (with header), .jsonl or .parquet file, or a glob of them, "
                       "of long-format rows. Required."))
    columns = _group(parser, COLUMNS)
    # One declaration for both jobs: Beam builds one parser of every options class
    # loaded in a process, and argparse refuses a flag declared twice.
    columns.add_argument(
        "--class_order", choices=contract.CLASS_ORDERS,
        help=_for_job(
            job,
            images="How class ids are numbered from the train split's class names: "
                   "name, their sorted() order, as Keras image_dataset_from_directory "
                   "and torchvision ImageFolder number classes; frequency, decreasing "
                   "train frequency (ties in reverse byte order), tf.Transform's own "
                   "order. --append keeps the dataset's order (docs/LABELS.md). "
                   "Default: name.",
            timeseries="With --series_labels, how class ids are numbered: name, the "
                       "labels' sorted() order (as Keras and torchvision number "
                       "classes); frequency, decreasing number of train windows (ties in "
                       "reverse byte order). Default: name."))
    columns.add_argument(
        "--label_column", default="label",
        help=_for_job(
            job,
            images="Manifest input: the column holding each image's class name, or with "
                   "--multi_label its set of names; none: no class label (needs "
                   "--target_columns).",
            timeseries="The label column of the --series_labels file (its series column "
                       "is --series_id_column)."))
    columns.add_argument(
        "--target_columns",
        help=_for_job(
            job,
            images="Comma-separated manifest columns of numeric targets (JSON numbers, or "
                   "CSV text that parses as a finite float32), stored as float32 [k] "
                   "'target'; a missing, non-numeric or non-finite value is rejected "
                   "(missing_target, invalid_target, non_finite_target). Default: none.",
            timeseries="The columns to predict, a column role (docs/TIMESERIES_JOB.md, "
                       "Covariates); --value_columns names them too. Default: "
                       "--value_columns."))
    _group(parser, SPLITS).add_argument(
        "--split_fractions",
        help=_for_job(
            job,
            images="train,validation,test fractions of keys, by hash (split folders or a "
                   "split column win). Default " + DEFAULT_SPLIT_FRACTIONS + ".",
            timeseries="train,validation,test fractions of each series' rows in time "
                       "order (--split_by=time) or of series (--split_by=series); not "
                       "with --split_times. Default " + DEFAULT_SPLIT_FRACTIONS + "."))
    _add_output_flags(_group(parser, OUTPUT), job)
    _group(parser, STATISTICS).add_argument(
        "--statistics", default="on", choices=("on", "off"),
        help="on: describe what was written, per split, from facts taken in the one pass "
             "over the data: statistics in TFDV's format and the inferred schema under "
             "statistics/, drift between splits (statistics/drift.json), " + _for_job(
                 job, images="the images' quality flags (statistics/flags.jsonl) ",
                 timeseries="the rows' and series' statistics ")
             + "and a report a browser opens offline, report/index.html "
               "(docs/KNOW_YOUR_DATA.md); off: none of these.")


def _add_output_flags(output: Any, job: str | None) -> None:
    output.add_argument(
        "--output_dir",
        help="Where shards, transform_fn/, transformed_metadata/, errors/ and "
             "manifest.json are written (local path or gs://...). Required.")
    output.add_argument(
        "--name",
        help="Dataset name, the shard file prefix: <name>-<split>-SSSSS-of-NNNNN. "
             "Default: the job's name (" + (job or IMAGES) + ").")
    output.add_argument(
        "--num_shards", type=int,
        help="Shards per split (capped at the split's record count). Default: from "
             "--target_shard_mb.")
    add_mib_argument(
        output, "--target_shard_mb", DEFAULT_TARGET_SHARD_BYTES,
        "Target shard size in MiB of serialized examples (before GZIP), used when "
        "--num_shards is not given.")
    output.add_argument(
        "--compression", default=contract.GZIP, choices=contract.COMPRESSIONS,
        help="Shard files: gzip, TFRecords in a GZIP stream, the format tf.data reads "
             "with compression_type='GZIP'; or none, plain TFRecord files each with a "
             "record index beside it (<shard>.idx), which PyTorch, Grain, TFDS and DALI "
             "readers can seek in (docs/READER.md). JPEG/PNG shards are stored at gzip "
             "level 0 by default anyway, so none costs them no space.")
    output.add_argument(
        "--gzip_level", type=int,
        help="Level 0-9 of the GZIP shard files, as zlib's: 0 keeps the GZIP container "
             "and stores the records, 1-6 are deflated by ISA-L (4-7x zlib's speed), 7-9 "
             "by zlib. " + _for_job(
                 job,
                 images="Default: 0 for JPEG images of 192 px or more and PNG of 64 px or "
                        "more, already compressed (deflate shrinks a 224 px JPEG shard ~4 "
                        "%%, at ~0.4 ms of a core per image); 6 otherwise: smaller "
                        "JPEG/PNG (a 64 px JPEG shard shrinks ~26 %%) and raw pixels "
                        "(photos ~30 %%).",
                 timeseries="Default: 6, which shrinks window shards ~20 %% (on "
                            "overlapping windows levels 1-6 write ~25 %% more than "
                            "zlib's 7-9)."))
    output.add_argument(
        "--max_error_fraction", type=float, default=DEFAULT_MAX_ERROR_FRACTION,
        help="Fail (and publish no manifest) if more than this fraction of the inputs "
             "is rejected.")
    output.add_argument(
        "--overwrite", action="store_true",
        help="Replace a finished dataset already in --output_dir (refused otherwise).")
    output.add_argument(
        "--no_resume", action="store_true",
        help="Start clean: ignore the shards an interrupted run into --output_dir "
             "finished. By default a rerun with the same input and options keeps them "
             "(each verified by its recorded size and sha256) and writes only the rest "
             "(docs/RESUME_AND_APPEND.md).")
    if job in (None, IMAGES):
        output.add_argument(
            "--append", action="store_true",
            help="Add the inputs a finished dataset in --output_dir does not hold yet, "
                 "as new shards beside the old ones, preprocessed by its transform_fn; "
                 "publishes the next dataset version (docs/RESUME_AND_APPEND.md).")
    output.add_argument(
        "--debug", action="store_true",
        help="On a failure, print every traceback (the run's and those Beam logs) as it "
             "comes, and still end with the one-line error.")
    output.add_argument(
        "--tft_temp_dir",
        help="Folder for tf.Transform's scratch files, written through TensorFlow's own "
             "filesystem; also where the transform output is loaded from and the "
             "job spills its scratch rows. The run works in a folder of its own inside "
             "it (tfrecord-etl-<hash of --output_dir>) and removes only that. Must be "
             "shared storage (gs://...) on Dataflow. Default: <output_dir>/tmp, or a "
             "local temp folder when --output_dir is an object store and the runner is "
             "local (docs/RUNNING_AT_SCALE.md).")
    output.add_argument(
        "--shared_folders",
        help="Comma-separated local folders every worker host mounts at the same path "
             "as this machine (NFS, Filestore): where the workers share no disk with it "
             "(a Flink or Spark cluster), a local --input, --output_dir, --tft_temp_dir "
             "or --temp_location must lie inside one. Each must exist here; not for "
             "Dataflow. Default: none.")


def add_image_flags(parser: Any) -> None:
    """The image job's own flags."""
    _add_image_input_flags(_group(parser, INPUT))
    _add_image_label_flags(_group(parser, COLUMNS))
    splits = _group(parser, SPLITS)
    splits.add_argument(
        "--cross_split_duplicates", default="report", choices=("report", "drop", "off"),
        help="report: find images that are byte-, pixel- or near-identical (from hashes "
             "taken in each image's one decode) and list them in duplicates/pairs.jsonl "
             "and summary.json, with a warning when any cross splits; drop: also remove "
             "the train copy of each image another split holds (and the validation copy "
             "of a test image), as cross_split_duplicate dead letters; off: no hashes, "
             "no report (docs/IMAGE_JOB.md, 'Duplicates and leakage').")
    splits.add_argument(
        "--near_duplicate_distance", type=int, default=DEFAULT_NEAR_DISTANCE,
        help="Two images are near duplicates when their 64-bit perceptual hashes differ "
             "in at most this many bits (measured in docs/IMAGE_JOB.md).")
    _add_image_preprocessing_flags(_group(parser, PREPROCESSING))


def _add_image_input_flags(group: Any) -> None:
    group.add_argument(
        "--max_image_pixels", type=int, default=DEFAULT_MAX_IMAGE_PIXELS,
        help="Reject images whose header declares more pixels (decompression bombs are "
             "refused before decoding).")
    add_mib_argument(
        group, "--max_file_mb", DEFAULT_MAX_FILE_BYTES,
        "Reject input files larger than this (read at most this much).")
    add_mib_argument(
        group, "--decode_budget_mb", DEFAULT_DECODE_BUDGET_BYTES,
        "What the images one worker process decodes at once may hold, in MiB, weighed "
        "from each header (pixels x channels, the decode's copies, the resize's): images "
        "are batched within it, one heavier than a third of it is decoded alone, and one "
        "heavier than all of it is rejected (image_too_large). The default decodes a "
        "4-channel image at the default --max_image_pixels alone (docs/IMAGE_JOB.md).")
    group.add_argument(
        "--read_timeout_s", type=float, default=DEFAULT_READ_TIMEOUT_S,
        help="Reject an input file whose read takes longer than this many seconds "
             "(read_timed_out: a stalled mount or device), rather than wait for it; 0 "
             "waits without limit.")
    group.add_argument(
        "--lenient_decoding", action="store_true",
        help="Store images whose data a strict decoder reports damaged, as TensorFlow "
             "decodes them (often smeared or shifted). By default such JPEGs (libjpeg's "
             "'Corrupt JPEG data' warnings) and GIFs are rejected as corrupt_image_data.")
    group.add_argument(
        "--allow_paths_outside_root", action="store_true",
        help="Read inputs that resolve outside the input root (the folder, or the "
             "manifest's folder): manifest paths with ../, absolute paths or other URIs, "
             "and local files or folders whose symbolic links lead outside the root. "
             "Rejected as path_outside_root otherwise.")


def _add_image_label_flags(group: Any) -> None:
    group.add_argument(
        "--label_vocabulary",
        help="Optional text file, one label per line: images with any other label are "
             "rejected (unknown_label). Default: none, every label is kept.")
    group.add_argument(
        "--multi_label", action="store_true",
        help="Manifest input: the label column holds a set of class names per image "
             "(JSONL: an array of strings; CSV: names split on --label_separator). "
             "Duplicates collapse; an empty set is allowed. Stored as the sorted class "
             "ids; make_dataset gives multi-hot labels.")
    group.add_argument(
        "--label_separator", default=DEFAULT_LABEL_SEPARATOR,
        help="With --multi_label in a CSV manifest: what separates class names.")
    group.add_argument(
        "--require_label", action="store_true",
        help="With --multi_label: reject images whose set of class names is empty "
             "(missing_label).")
    group.add_argument(
        "--normalize_targets", default="zscore", choices=("zscore", "none"),
        help="zscore: store (x - mean) / std with the train split's exact mean and "
             "population std, both recorded in the manifest; none: store targets as "
             "given.")
    group.add_argument(
        "--carry_columns",
        help="Comma-separated manifest columns of text copied into each example "
             "unchanged, one string feature per column (ids, captions, URLs).")


def _add_image_preprocessing_flags(group: Any) -> None:
    group.add_argument(
        "--image_size", type=int, default=224,
        help="Output images are image_size x image_size: shorter side resized to this "
             "(bilinear, antialiased), then centre-cropped.")
    group.add_argument(
        "--image_format", default=contract.JPEG, choices=contract.IMAGE_FORMATS,
        help="Stored encoding: jpeg (smallest, lossy), png (lossless, larger, slower to "
             "decode), raw (uint8 pixels, largest, no decode). Trade-offs measured in "
             "docs/FORMAT.md.")
    group.add_argument(
        "--jpeg_quality", type=int, default=95,
        help="JPEG quality 1-100 when --image_format=jpeg.")
    group.add_argument(
        "--ignore_exif_orientation", action="store_true",
        help="Store JPEG pixels in their stored order. By default a JPEG's EXIF "
             "orientation tag (2-8: rotated or mirrored, as phones and cameras write) "
             "turns the image upright first, in transform_fn, so serving does the same.")
    group.add_argument(
        "--alpha_background",
        help="R,G,B (0-255 each, e.g. 255,255,255): composite images with an alpha "
             "channel on this colour. Default: drop the alpha channel, as Pillow's "
             "convert('RGB') and tf.io.decode_image(channels=3) do (transparent areas "
             "then show whatever colour is stored under them).")


def add_timeseries_flags(parser: Any) -> None:
    """The time-series job's own flags."""
    add_mib_argument(
        _group(parser, INPUT), "--max_line_mb", DEFAULT_MAX_LINE_BYTES,
        "Longest CSV or JSON Lines line read, in MiB (at most "
        f"{MAX_LINE_BYTES_LIMIT // MIB}); a longer one stops the job, naming it.")
    _add_series_column_flags(_group(parser, COLUMNS))
    splits = _group(parser, SPLITS)
    splits.add_argument(
        "--split_by", choices=SPLIT_MODES,
        help="time (default without --series_labels): by time within each series; "
             "series (default with --series_labels): whole series by a hash of the id.")
    splits.add_argument(
        "--split_times",
        help="With --split_by=time: 'T1,T2' global cut-offs (train < T1 <= validation < "
             "T2 <= test), numbers or ISO 8601 like the timestamps, instead of "
             "--split_fractions (not both). Default: none, --split_fractions.")
    _add_window_flags(_group(parser, PREPROCESSING))


_ROLE_HELP = {
    "--past_columns": "Observed real covariates: in the window only.",
    "--known_columns": "Real covariates known in advance: over the window and the horizon "
                       "(a missing one cuts the series there).",
    "--static_real_columns": "Real columns constant per series: once per window.",
    "--known_categorical_columns": "Categorical covariates known in advance (events, "
                                   "holidays): vocabulary ids over the window and the "
                                   "horizon.",
    "--static_categorical_columns": "Categorical columns constant per series (store, "
                                    "item): vocabulary ids, once per window.",
}


def _add_series_column_flags(group: Any) -> None:
    group.add_argument(
        "--series_id_column", default="series_id",
        help="The column naming each row's series (its id, text).")
    group.add_argument(
        "--timestamp_column", default="timestamp",
        help="The column of each row's time: numbers, or ISO 8601 dates/times (naive = "
             "UTC), or dates in --timestamp_format.")
    group.add_argument(
        "--timestamp_format",
        help="Python strptime format of the timestamps, for dates that are not ISO 8601, "
             "e.g. %%m/%%d/%%Y for 01/31/1959 (naive = UTC). Default: none, numbers or "
             "ISO 8601.")
    group.add_argument(
        "--value_columns",
        help="Comma-separated real columns to predict (several: multivariate); "
             "--target_columns is another name for them (pass one of the two). Default: "
             + DEFAULT_VALUE_COLUMN + ".")
    # Beam already owns --labels (Dataflow job labels, key=value); a --labels value
    # naming a .csv/.jsonl file is taken as ours (pipelines/timeseries.py, labels_path),
    # and --series_labels is the unambiguous spelling.
    group.add_argument(
        "--series_labels",
        help="Optional .csv/.jsonl mapping series id → label (also accepted as "
             "--labels=<file>): classify windows by their series' label instead of "
             "forecasting. Default: none, forecast.")
    # Column roles (docs/TIMESERIES_JOB.md, "Covariates"); any of them switches to the
    # covariate layout (known, static_real, target_scale).
    for flag, text in _ROLE_HELP.items():
        group.add_argument(flag, help=text)
    group.add_argument(
        "--calendar_features",
        help="Known features from the timestamps: any of " + ",".join(CALENDAR_FEATURES)
             + ".")


def _add_window_flags(group: Any) -> None:
    group.add_argument("--window_size", type=int, help="Rows per window. Required.")
    group.add_argument("--shift", type=int, default=1,
                       help="Rows between the starts of consecutive windows.")
    group.add_argument("--stride", type=int, default=1,
                       help="Rows between consecutive elements of a window.")
    group.add_argument("--horizon", type=int,
                       help="Target rows after the window (same stride). Default 1; 0 "
                            "with --series_labels.")
    group.add_argument("--duplicates", default="mean", choices=DUPLICATE_POLICIES,
                       help="Rows sharing a timestamp: average them, or reject all.")
    group.add_argument("--missing", default="drop", choices=MISSING_POLICIES,
                       help="Rows with a missing value: drop, forward-fill, interpolate "
                            "in time, or reject as dead letters.")
    group.add_argument("--max_gap", default="auto",
                       help="Split a series where consecutive timestamps are further "
                            "apart than this (timestamp units; seconds for dates), "
                            "'auto' (1.5 x the median step) or 'none'.")
    group.add_argument("--normalize", default="global", choices=("global", "per_series"),
                       help="z-score statistics over all train rows, or per series "
                            "(needs --split_by=time).")
    group.add_argument("--target_transform", choices=TARGET_TRANSFORMS,
                       help="Applied to the targets before scaling. Default: none.")


_ADD_JOB_FLAGS = {IMAGES: add_image_flags, TIMESERIES: add_timeseries_flags}


class _HelpFormatter(argparse.HelpFormatter):
    """Shows every flag's default: after its help, unless the help states it."""

    def __init__(self, prog: str) -> None:
        super().__init__(prog, max_help_position=32, width=100)

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if action.default is argparse.SUPPRESS or "default" in text.lower():
            return text
        if text.endswith("Required."):
            return text
        if action.nargs == 0:  # store_true
            return f"{text} (default: off)"
        if action.default is None:
            return f"{text} (default: none)"
        return f"{text} (default: %(default)s)"


class _BeamHelpAction(argparse.Action):
    """``--help_beam``: prints Beam's own flags and exits."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, *_: Any) -> NoReturn:
        beam_parser(parser.prog).print_help()
        parser.exit()


class _RaisingParser(argparse.ArgumentParser):
    """A parser whose errors are ValueErrors, for the job's one ``error:`` line."""

    def error(self, message: str) -> NoReturn:
        raise ValueError(f"{message.removeprefix('argument ')} (see --help).")


def help_parser(job: str, parser_class: type[argparse.ArgumentParser] = argparse.ArgumentParser
                ) -> argparse.ArgumentParser:
    """A parser of ``job``'s own flags, for ``--help``: its groups in order, each
    flag with the job's help and its default, ``--help_beam`` for Beam's flags."""
    parser = parser_class(
        prog=f"python -m pipelines.{job}", usage=_USAGE[job],
        description=_DESCRIPTION[job], epilog=_EPILOG, formatter_class=_HelpFormatter,
        allow_abbrev=False)
    parser.add_argument(HELP_BEAM, action=_BeamHelpAction,
                        help="show Beam's flags (--runner, workers, Dataflow ...) and exit")
    for title in GROUPS:
        _group(parser, title)
    add_shared_flags(parser, job)
    _ADD_JOB_FLAGS[job](parser)
    return parser


def beam_parser(prog: str) -> argparse.ArgumentParser:
    """A parser of every flag Beam's own options classes define (imports Beam)."""
    from apache_beam.options.pipeline_options import PipelineOptions, _BeamArgumentParser

    parser = _BeamArgumentParser(
        prog=prog, usage="%(prog)s [job flags: --help] [Beam flags below]",
        description=f"Beam's pipeline options, which {prog} accepts beside its own flags "
                    f"(--help). Without --runner the job runs locally and offline on "
                    f"Beam's FnApiRunner.", add_help=False, allow_abbrev=False)
    for cls in PipelineOptions.__subclasses__():
        if cls.__module__.startswith("apache_beam.") and "_add_argparse_args" in cls.__dict__:
            cls._add_argparse_args(parser)
    return parser


def exit_if_help(job: str, argv: Sequence[str]) -> None:
    """Prints ``job``'s help (``-h``, ``--help``) or Beam's (``--help_beam``) and exits
    with status 0 when ``argv`` asks for one; returns otherwise."""
    asked = [arg for arg in argv if arg.split("=", 1)[0] in _HELP_FLAGS]
    if asked:
        help_parser(job).parse_args(asked[:1])


def check_values(job: str, argv: Sequence[str]) -> None:
    """Checks the values of ``job``'s own flags in ``argv`` (types, choices); Beam's
    flags and unknown ones are left to Beam and ``flags.check_known_flags``.

    Raises:
        ValueError: one line naming the flag and the value refused
            (``--window_size: invalid int value: 'abc' (see --help).``), where Beam's
            parser would print its whole usage and exit with status 2.
    """
    help_parser(job, _RaisingParser).parse_known_args(list(argv))
