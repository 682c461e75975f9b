"""A dataset's statistics and schema files, read without TensorFlow.

    from reader.stats import files as stats_files

    per_split = stats_files.read_split_statistics("out/images")   # {"train": ..., "test": ...}
    brightness = stats_files.feature_stats(per_split["test"], "brightness")
    schema = stats_files.read_schema("out/images/statistics/schema.pbtxt")

A split's statistics file (``contract.statistics_relpath``) is what
``tfdv.load_statistics`` reads: an uncompressed TFRecord file holding ONE record, a
serialized ``DatasetFeatureStatisticsList`` with one dataset named for the split.
Here the frame is checked with the reader's own TFRecord code (both masked CRC32Cs,
:mod:`reader.format.record_index`) and the file is read through :func:`reader.records.read_file`,
so local paths and URIs (``gs://``) alike work with only ``protobuf`` installed.
"""

from __future__ import annotations

import io
import posixpath
import re

from google.protobuf import message, text_format
from tensorflow_metadata.proto.v0 import schema_pb2, statistics_pb2

from reader import records
from reader.format import contract, record_index
from reader.format.contract import DatasetError

# anomalies/path.cc kStandardStep: a step TFDV writes without quotes.
_STANDARD_STEP = re.compile(r"(\([^()]*\))|([^().']+)")


def read_statistics(path: str) -> statistics_pb2.DatasetFeatureStatisticsList:
    """The ``DatasetFeatureStatisticsList`` in a one-record TFRecord file.

    Raises:
        DatasetError: the file is missing, holds no record or several, a frame or
            checksum is bad, or the record is not a statistics proto.
    """
    try:
        data = records.read_file(path)
    except FileNotFoundError as e:
        raise DatasetError(f"No statistics file {path!r}: was the dataset written "
                           f"with statistics turned off?") from e
    return parse_statistics(data, path)


def parse_statistics(data: bytes, path: str) -> statistics_pb2.DatasetFeatureStatisticsList:
    """:func:`read_statistics` of a file's bytes, read from ``path`` (named in errors)."""
    record = _one_record(data, path)
    try:
        return statistics_pb2.DatasetFeatureStatisticsList.FromString(record)
    except message.DecodeError as e:
        raise DatasetError(f"Statistics file {path!r} does not hold a "
                           f"DatasetFeatureStatisticsList: {e}") from e


def _one_record(data: bytes, path: str) -> bytes:
    """The one record of an uncompressed TFRecord file's bytes, both CRCs checked."""
    try:
        found = list(record_index.read_frames(io.BytesIO(data), path))
    except record_index.RecordError as e:
        raise DatasetError(str(e)) from e
    if len(found) != 1:
        raise DatasetError(f"Statistics file {path!r} holds {len(found)} records; "
                           f"tfdv.load_statistics reads exactly one.")
    return found[0]


def split_names(data_dir: str, version: int = 1, series: bool = False) -> list[str]:
    """The splits with a statistics file on disk: ``contract.SPLITS`` order, then
    any others sorted.

    Raises:
        DatasetError: there is no statistics folder for that version.
    """
    directory = posixpath.join(data_dir, contract.statistics_dir(version))
    try:
        names = records.file_names(directory)
    except FileNotFoundError as e:
        raise DatasetError(f"No statistics under {directory!r}: was the dataset "
                           f"written with statistics turned off?") from e
    suffix = contract.SERIES_STATISTICS_SUFFIX if series else contract.STATISTICS_SUFFIX
    found = {name[:-len(suffix)] for name in names if name.endswith(suffix)
             and (series or not name.endswith(contract.SERIES_STATISTICS_SUFFIX))}
    return contract.ordered_splits(found)


def read_split_statistics(data_dir: str, version: int = 1, series: bool = False
                          ) -> dict[str, statistics_pb2.DatasetFeatureStatistics]:
    """Each split's ``DatasetFeatureStatistics`` (``series``: its per-series ones).

    Returns:
        ``{split: dataset}`` in :func:`split_names` order.

    Raises:
        DatasetError: no statistics folder, or a file that is not one record
            holding one dataset.
    """
    result = {}
    for split in split_names(data_dir, version, series):
        path = posixpath.join(data_dir, contract.statistics_relpath(split, version, series))
        datasets = read_statistics(path).datasets
        if len(datasets) != 1:
            raise DatasetError(f"Statistics file {path!r} holds {len(datasets)} "
                               f"datasets; the format has one per file.")
        result[split] = datasets[0]
    return result


def read_schema(path: str) -> schema_pb2.Schema:
    """The text ``Schema`` proto at ``path`` (what ``tfdv.load_schema_text`` reads).

    Raises:
        DatasetError: the file is missing or is not a text Schema.
    """
    try:
        text = records.read_file(path).decode("utf-8")
    except FileNotFoundError as e:
        raise DatasetError(f"No schema file {path!r}.") from e
    return parse_schema(text, path)


def parse_schema(text: str, path: str) -> schema_pb2.Schema:
    """:func:`read_schema` of a file's text, read from ``path`` (named in errors)."""
    try:
        return text_format.Parse(text, schema_pb2.Schema())
    except text_format.ParseError as e:
        raise DatasetError(f"Schema file {path!r} is not a text Schema proto: {e}") from e


def schema_text(schema: schema_pb2.Schema) -> str:
    """``schema`` as the text ``tfdv.write_schema_text`` writes."""
    return text_format.MessageToString(schema)


def feature_name(feature: statistics_pb2.FeatureNameStatistics) -> str:
    """A feature's name: ``name``, or its ``path`` steps joined by ``.`` as TFDV
    serializes a path."""
    if feature.WhichOneof("field_id") == "path":
        return ".".join(feature.path.step)
    return feature.name


def serialized_path(feature: statistics_pb2.FeatureNameStatistics) -> str:
    """The feature's path as TFDV serializes it (``Path::Serialize``), the name of its
    string domain and anomalies: a step with a dot, quote or parenthesis is quoted."""
    steps = (feature.path.step if feature.WhichOneof("field_id") == "path"
             else [feature.name])
    return ".".join(step if _STANDARD_STEP.fullmatch(step)
                    else "'" + step.replace("'", "''") + "'" for step in steps)


def feature_stats(dataset: statistics_pb2.DatasetFeatureStatistics, name: str
                  ) -> statistics_pb2.FeatureNameStatistics | None:
    """The statistics of feature ``name`` in ``dataset``, or None if not listed."""
    return next((f for f in dataset.features if feature_name(f) == name), None)
