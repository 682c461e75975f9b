"""The on-disk contract between the ETL jobs and every reader: names, layout, specs.

The reader owns it: ``etl/`` and ``pipelines/`` import it from here, never the
reverse, so a training install (TensorFlow and ``reader/``) has the whole format.
Nothing here imports TensorFlow, Apache Beam or tf.Transform: what needs TensorFlow
(parse specs, stored-image decoding, reading through ``tf.io.gfile``) is in
``reader.tfdata``.

Layout of a finished output directory::

    <output_dir>/
      manifest.json                      written last; its presence means "complete"
      transform_fn/                      tf.Transform SavedModel (serving preprocessing)
      transformed_metadata/              tf.Transform schema of the stored features
      metadata/                          tf.Transform schema of the raw (serving) input
      errors/rejected.jsonl              one JSON object per rejected input
      duplicates/summary.json            image datasets: duplicate counts by kind and splits
      duplicates/pairs.jsonl             one JSON object per duplicate pair
      <split>/<name>-<split>-SSSSS-of-NNNNN.tfrecord.gz      (--compression=gzip)
      <split>/<name>-<split>-SSSSS-of-NNNNN.tfrecord         (--compression=none)
      <split>/<name>-<split>-SSSSS-of-NNNNN.tfrecord.idx     its record index
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import posixpath
from collections.abc import Callable, Iterable, Mapping
from typing import Any

FORMAT_VERSION = 1


class DatasetError(ValueError):
    """The directory is not a complete, intact dataset (the message names the file)."""

MANIFEST_FILENAME = "manifest.json"
ERRORS_DIRNAME = "errors"
REJECTED_FILENAME = "rejected.jsonl"
# The image job's duplicate report (docs/FORMAT.md, "Duplicate report").
DUPLICATES_SUMMARY_RELPATH = "duplicates/summary.json"
DUPLICATE_PAIRS_RELPATH = "duplicates/pairs.jsonl"
TRANSFORM_FN_DIRNAME = "transform_fn"
# What the jobs know about the data they wrote (docs/KNOW_YOUR_DATA.md, docs/FORMAT.md
# "Statistics"): per split, TFDV's DatasetFeatureStatisticsList in a one-record
# TFRecord file (what tfdv.load_statistics reads), the schema inferred from train as
# a text proto, drift between splits, and the image-quality flags; the report
# renders them. Version N >= 2 of an appended dataset keeps its own under
# ``statistics/vNNNNN/`` (statistics_dir).
STATISTICS_DIRNAME = "statistics"
STATISTICS_SUFFIX = ".tfrecord"
SERIES_STATISTICS_SUFFIX = "-series.tfrecord"
SCHEMA_FILENAME = "schema.pbtxt"
DRIFT_FILENAME = "drift.json"
FLAGS_FILENAME = "flags.jsonl"
REPORT_RELPATH = "report/index.html"
# The image-quality flags of statistics/flags.jsonl, named and ordered as cleanvision
# names its issue types (etl/images/quality.py holds their rules).
QUALITY_FLAGS: tuple[str, ...] = ("dark", "light", "blurry", "low_information", "odd_size",
                                  "odd_aspect_ratio", "grayscale")
TRANSFORMED_METADATA_DIRNAME = "transformed_metadata"
# tft.TFTransformOutput.RAW_METADATA_DIR: what its raw_feature_spec() reads.
RAW_METADATA_DIRNAME = "metadata"

# Shard compression (manifest ``compression``; a manifest without one is GZIP): a GZIP
# stream of TFRecords, or the TFRecords as they are, each such shard with a record
# index beside it so that a reader without TensorFlow can seek to any record.
GZIP = "gzip"
NO_COMPRESSION = "none"
COMPRESSIONS: tuple[str, ...] = (GZIP, NO_COMPRESSION)
_SHARD_SUFFIXES = {GZIP: ".tfrecord.gz", NO_COMPRESSION: ".tfrecord"}
# ``tf.data.TFRecordDataset``'s ``compression_type`` for each.
_TF_COMPRESSION_TYPES = {GZIP: "GZIP", NO_COMPRESSION: ""}
SHARD_SUFFIX = _SHARD_SUFFIXES[GZIP]
# The record index of an uncompressed shard is ``<shard path>.idx``: one line per
# record, "<byte offset> <byte length>" of its whole TFRecord frame, in file order:
# the format of the ``tfrecord`` package's ``create_index`` and NVIDIA DALI's
# ``tfrecord2idx``.
INDEX_SUFFIX = ".idx"
# Bytes of TFRecord framing around each record: length (8), its masked CRC32C (4),
# and the data's masked CRC32C (4).
RECORD_FRAMING_BYTES = 16


@dataclasses.dataclass(frozen=True)
class FileFacts:
    """A written file's size and sha256, as the manifest records them."""

    num_bytes: int
    sha256: str

# What an example holds (manifest ``kind``) and what its target is (manifest ``task``).
IMAGES = "images"
TIMESERIES = "timeseries"
CLASSIFICATION = "classification"  # one class id per example
MULTI_LABEL = "multi_label"  # a set of class ids per example (images)
REGRESSION = "regression"  # numeric targets only, no class (images)
FORECAST = "forecast"  # the series' next rows (time series)
TASKS: tuple[str, ...] = (CLASSIFICATION, MULTI_LABEL, REGRESSION, FORECAST)

# Top-level manifest entries of image datasets, each present only when used:
# numeric targets {"columns": [k names], "normalize", "mean": [k], "std": [k]} (stored
# ``target`` = (raw - mean) / std with ZSCORE; as given with NO_NORMALIZATION), and
# the string columns carried verbatim into each example, each its own feature.
TARGETS_ENTRY = "targets"
CARRIED_COLUMNS_ENTRY = "carried_columns"
ZSCORE = "zscore"
NO_NORMALIZATION = "none"

# Label id of a label that never occurs in the train split (classification and
# multi-label; the reader's multi-hot ignores it).
UNKNOWN_LABEL_ID = -1
# How class ids are numbered (manifest ``preprocessing.labels.class_order``): ``name``,
# Python's sorted() of the train split's class names (as Keras and torchvision number
# class folders); ``frequency``, decreasing train frequency, ties in reverse byte order.
# A manifest without the entry was numbered by frequency.
CLASS_ORDER_NAME = "name"
CLASS_ORDER_FREQUENCY = "frequency"
CLASS_ORDERS: tuple[str, ...] = (CLASS_ORDER_NAME, CLASS_ORDER_FREQUENCY)

# Stored image encodings (manifest ``preprocessing.image_format``); ``raw`` is the
# row-major ``size × size × 3`` uint8 pixel bytes.
JPEG = "jpeg"
PNG = "png"
RAW = "raw"
IMAGE_FORMATS: tuple[str, ...] = (JPEG, PNG, RAW)

TRAIN = "train"
VALIDATION = "validation"
TEST = "test"
SPLITS: tuple[str, ...] = (TRAIN, VALIDATION, TEST)

# Raw feature keys of the image job: the input of its preprocessing_fn and of the
# exported transform_fn (serving feeds the same three).
RAW_IMAGE_KEY = "image"
RAW_LABEL_KEY = "label"
RAW_SOURCE_KEY = "key"

# Feature keys of the stored image examples (see docs/FORMAT.md).
IMAGE_KEY = "image"
HEIGHT_KEY = "height"
WIDTH_KEY = "width"
CHANNELS_KEY = "channels"
# ``label``/``label_name``: fixed [] (classification) or var_len, ids ascending
# (multi-label); absent in regression. Image datasets with numeric targets add
# ``target`` (TARGET_KEY below) float32 [k].
LABEL_KEY = "label"
LABEL_NAME_KEY = "label_name"
SOURCE_KEY = "key"

# Feature keys of the stored time-series window examples (see docs/FORMAT.md).
WINDOW_KEY = "window"
TARGET_KEY = "target"
SERIES_ID_KEY = "series_id"
WINDOW_START_KEY = "window_start"
# With column roles (forecasting covariates, docs/TIMESERIES_JOB.md "Covariates"):
# known covariates and calendar features over window and horizon, known and static
# categoricals (int64 vocabulary ids; raw: the strings), static reals, and each
# target's (centre, scale) to return predictions to real units. ``time`` is a raw
# (serving) input only: whole seconds since the epoch of the W + H steps.
KNOWN_KEY = "known"
KNOWN_CAT_KEY = "known_cat"
STATIC_CAT_KEY = "static_cat"
STATIC_REAL_KEY = "static_real"
TARGET_SCALE_KEY = "target_scale"
RAW_TIME_KEY = "time"
# The stored blocks a forecasting model takes as inputs, in this order, where present.
MODEL_INPUT_KEYS: tuple[str, ...] = (WINDOW_KEY, KNOWN_KEY, KNOWN_CAT_KEY, STATIC_CAT_KEY,
                                     STATIC_REAL_KEY)

# tf.Transform vocabulary file name of the label vocabulary.
LABEL_VOCABULARY_NAME = "label"


def check_compression(compression: str) -> str:
    """``compression`` if it is one of :data:`COMPRESSIONS`, else ValueError."""
    if compression not in COMPRESSIONS:
        raise ValueError(f"--compression must be one of {', '.join(COMPRESSIONS)}, got "
                         f"{compression!r}.")
    return compression


def shard_suffix(compression: str = GZIP) -> str:
    """The file suffix of shards written with ``compression``."""
    return _SHARD_SUFFIXES[check_compression(compression)]


def compression_of(manifest: Mapping[str, Any]) -> str:
    """The shards' compression a manifest records (GZIP for manifests without one).

    Raises:
        ValueError: a compression this reader version does not know.
    """
    compression = manifest.get("compression", GZIP)
    if compression not in COMPRESSIONS:
        raise ValueError(f"The dataset's shards have compression {compression!r}, which "
                         f"this reader version does not read ({', '.join(COMPRESSIONS)}).")
    return compression


def tf_compression_type(manifest: Mapping[str, Any]) -> str:
    """``tf.data.TFRecordDataset``'s ``compression_type`` for the manifest's shards."""
    return _TF_COMPRESSION_TYPES[compression_of(manifest)]


def shard_filename(name: str, split: str, index: int, num_shards: int,
                   compression: str = GZIP) -> str:
    """File name of shard ``index`` (0-based) of ``num_shards`` for ``split``.

    >>> shard_filename("images", "train", 0, 12)
    'images-train-00000-of-00012.tfrecord.gz'
    >>> shard_filename("images", "train", 0, 12, NO_COMPRESSION)
    'images-train-00000-of-00012.tfrecord'
    """
    if not 0 <= index < num_shards:
        raise ValueError(f"Shard index {index} is outside [0, {num_shards}).")
    return f"{name}-{split}-{index:05d}-of-{num_shards:05d}{shard_suffix(compression)}"


def shard_relpath(name: str, split: str, index: int, num_shards: int,
                  compression: str = GZIP) -> str:
    """Shard path relative to the output directory, always with ``/`` separators."""
    return f"{split}/{shard_filename(name, split, index, num_shards, compression)}"


def index_relpath(shard_path: str) -> str:
    """Where the record index of the uncompressed shard at ``shard_path`` is."""
    return shard_path + INDEX_SUFFIX


# libjpeg IDCT (``tf.io.decode_jpeg``'s ``dct_method``) that stored JPEGs decode
# with, in training and in serving code that decodes stored images: the accurate
# one is closer to the pixels that were encoded on every stored photo measured, at
# no measurable cost at 224 px (docs/FORMAT.md; scripts/measure_reader_idct.py, in git at
# 6b89e51).
# TensorFlow's default is the fast IDCT, whose pixels differ by up to 18 levels.
STORED_JPEG_DCT_METHOD = "INTEGER_ACCURATE"


def closest_split(name: str, splits: list[str]) -> str | None:
    """The split ``name`` most likely means: one whose name starts with it or that it
    starts with (``val``, ``valid`` → ``validation``; ``training`` → ``train``, as the
    job reads such split folders), else the closest spelling."""
    lowered = name.strip().lower()
    for split in splits:
        if lowered and (split.startswith(lowered) or lowered.startswith(split)):
            return split
    close = difflib.get_close_matches(lowered, splits, n=1)
    return close[0] if close else None


def check_splits(manifest: Mapping[str, Any], data_dir: str, splits: list[str]) -> None:
    """Checks that the dataset has every split in ``splits``.

    Raises:
        ValueError: naming the first unknown split, the dataset's splits and the
            split it most likely means.
    """
    known = list(manifest["splits"])
    for split in splits:
        if split in manifest["splits"]:
            continue
        closest = closest_split(split, known)
        hint = f" Did you mean {closest!r}?" if closest else ""
        raise ValueError(f"Unknown split {split!r}: {data_dir!r} has splits "
                         f"{', '.join(map(repr, known))}.{hint}")


def no_manifest_message(data_dir: str) -> str:
    """What a reader says of a directory without a manifest."""
    return (f"No {MANIFEST_FILENAME} under {data_dir!r}: did the ETL job finish? The "
            f"manifest is written last, only when the whole dataset is complete.")


def load_manifest(data_dir: str, read: Callable[[str], bytes | None]) -> dict[str, Any]:
    """``<data_dir>/manifest.json``, its bytes fetched by ``read``.

    Each reader reaches files its own way (``tf.io.gfile``, fsspec, the ETL's storage
    layer) and passes that here, so every one of them parses a manifest, and fails on
    a missing or damaged one, alike.

    Args:
        data_dir: the dataset's directory (local or a URI).
        read: the whole file at a path, or None if there is no file there.

    Raises:
        FileNotFoundError: if there is no manifest, i.e. the job did not finish.
        DatasetError: if the file is not a JSON object.
    """
    path = posixpath.join(data_dir, MANIFEST_FILENAME)
    data = read(path)
    if data is None:
        raise FileNotFoundError(no_manifest_message(data_dir))
    try:
        manifest = json.loads(data)
    except ValueError as e:  # JSONDecodeError, or bytes that are not UTF-8.
        raise DatasetError(f"{path!r} is not valid JSON ({e}): the job writes it whole, "
                           f"so it was changed or cut short afterwards.") from e
    if not isinstance(manifest, dict):
        raise DatasetError(f"{path!r} holds a JSON {type(manifest).__name__}, not a "
                           f"manifest object.")
    return manifest


def dumps_manifest(manifest: Mapping[str, Any]) -> str:
    """Canonical JSON text of a manifest: sorted keys, so reruns are byte-identical."""
    return json.dumps(manifest, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def ordered_splits(splits: Iterable[str]) -> list[str]:
    """Split names, each once: ``SPLITS`` order (train, validation, test), then any
    other name sorted (a manifest's JSON sorts its splits by name)."""
    names = set(splits)
    return [s for s in SPLITS if s in names] + sorted(names.difference(SPLITS))


def statistics_dir(version: int = 1) -> str:
    """The folder, relative to the dataset, of a version's statistics files."""
    return STATISTICS_DIRNAME if version == 1 else f"{STATISTICS_DIRNAME}/v{version:05d}"


def statistics_relpath(split: str, version: int = 1, series: bool = False) -> str:
    """A split's statistics file: the rows (or examples) of ``split``; with ``series``,
    one example per series (time series: length, missing values, gaps)."""
    suffix = SERIES_STATISTICS_SUFFIX if series else STATISTICS_SUFFIX
    return f"{statistics_dir(version)}/{split}{suffix}"
