"""reader.stats.files: statistics files written by TensorFlow, read back without it."""

from __future__ import annotations

import os

import fsspec
import pytest
import tensorflow as tf
from tensorflow_metadata.proto.v0 import schema_pb2, statistics_pb2

from reader.format import contract
from reader.format.contract import DatasetError
from reader.stats import files as stats_files


def statistics(split: str, num_examples: int = 3) -> statistics_pb2.DatasetFeatureStatisticsList:
    result = statistics_pb2.DatasetFeatureStatisticsList()
    dataset = result.datasets.add(name=split, num_examples=num_examples)
    feature = dataset.features.add(type=statistics_pb2.FeatureNameStatistics.STRING)
    feature.path.step.append("label")
    feature.string_stats.rank_histogram.buckets.add(label="cat", sample_count=num_examples)
    return result


def write_records(path: str, records: list[bytes]) -> None:
    """Writes ``records`` as TensorFlow writes a TFRecord file (no compression)."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with tf.io.TFRecordWriter(path) as writer:
        for record in records:
            writer.write(record)


def write_statistics(data_dir: str, split: str, version: int = 1, series: bool = False) -> None:
    path = os.path.join(data_dir, contract.statistics_relpath(split, version, series))
    write_records(path, [statistics(split).SerializeToString()])


def test_read_statistics_reads_a_file_tensorflow_wrote(tmp_path):
    path = str(tmp_path / "train.tfrecord")
    write_records(path, [statistics("train").SerializeToString()])
    assert stats_files.read_statistics(path) == statistics("train")


@pytest.mark.parametrize(("where", "message"), [
    (3, "length fails its CRC"),       # inside the 8-byte length
    (9, "length fails its CRC"),       # inside the length's CRC
    (14, "data fails its CRC"),        # inside the record
])
def test_read_statistics_refuses_a_corrupted_copy(tmp_path, where, message):
    path = str(tmp_path / "train.tfrecord")
    write_records(path, [statistics("train").SerializeToString()])
    with open(path, "rb") as f:
        data = bytearray(f.read())
    data[where] ^= 0x01
    with open(path, "wb") as f:
        f.write(bytes(data))
    with pytest.raises(DatasetError, match=message):
        stats_files.read_statistics(path)


def test_read_statistics_refuses_a_truncated_file(tmp_path):
    path = str(tmp_path / "train.tfrecord")
    write_records(path, [statistics("train").SerializeToString()])
    with open(path, "rb") as f:
        data = f.read()
    for cut in (5, len(data) - 2):
        with open(path, "wb") as f:
            f.write(data[:cut])
        with pytest.raises(DatasetError, match="ends inside the record"):
            stats_files.read_statistics(path)


@pytest.mark.parametrize(("records", "message"), [
    ([], "holds 0 records"),
    ([b"a", b"b"], "holds 2 records"),
    ([b"\xff\xff\xff"], "does not hold a DatasetFeatureStatisticsList"),
])
def test_read_statistics_needs_exactly_one_statistics_record(tmp_path, records, message):
    path = str(tmp_path / "train.tfrecord")
    write_records(path, records)
    with pytest.raises(DatasetError, match=message):
        stats_files.read_statistics(path)


def test_read_statistics_names_a_missing_file(tmp_path):
    with pytest.raises(DatasetError, match=r"No statistics file .*nothing\.tfrecord"):
        stats_files.read_statistics(str(tmp_path / "nothing.tfrecord"))


def test_read_split_statistics_orders_known_splits_first_then_others(tmp_path):
    for split in ("zeta", "test", "alpha", "train"):
        write_statistics(str(tmp_path), split)
    write_statistics(str(tmp_path), "train", series=True)
    write_statistics(str(tmp_path), "validation", version=2)
    per_split = stats_files.read_split_statistics(str(tmp_path))
    assert list(per_split) == ["train", "test", "alpha", "zeta"]
    assert per_split["alpha"] == statistics("alpha").datasets[0]
    assert list(stats_files.read_split_statistics(str(tmp_path), series=True)) == ["train"]
    assert list(stats_files.read_split_statistics(str(tmp_path), version=2)) == ["validation"]


def test_read_split_statistics_reads_a_uri_through_fsspec(tmp_path):
    local = tmp_path / "local"
    write_statistics(str(local), "train")
    write_statistics(str(local), "test")
    fs = fsspec.filesystem("memory")
    for split in ("train", "test"):
        with open(local / contract.statistics_relpath(split), "rb") as f:
            fs.pipe_file(f"/ds50/{contract.statistics_relpath(split)}", f.read())
    try:
        per_split = stats_files.read_split_statistics("memory://ds50")
    finally:
        fs.rm("/ds50", recursive=True)
    assert per_split == {s: statistics(s).datasets[0] for s in ("train", "test")}


def test_read_split_statistics_without_statistics_says_so(tmp_path):
    with pytest.raises(DatasetError, match="statistics turned off"):
        stats_files.read_split_statistics(str(tmp_path))


def test_read_split_statistics_refuses_a_file_of_several_datasets(tmp_path):
    two = statistics("train")
    two.datasets.add(name="All Examples")
    write_records(str(tmp_path / contract.statistics_relpath("train")), [two.SerializeToString()])
    with pytest.raises(DatasetError, match="holds 2 datasets"):
        stats_files.read_split_statistics(str(tmp_path))


def test_schema_text_round_trips_through_read_schema(tmp_path):
    schema = schema_pb2.Schema()
    schema.feature.add(name="label", type=schema_pb2.BYTES, domain="label")
    schema.string_domain.add(name="label", value=["cat", "dog"])
    path = tmp_path / contract.SCHEMA_FILENAME
    path.write_text(stats_files.schema_text(schema))
    assert stats_files.read_schema(str(path)) == schema


def test_read_schema_refuses_what_is_not_a_text_schema(tmp_path):
    (tmp_path / "bad.pbtxt").write_text("feature { nom: 1 }")
    with pytest.raises(DatasetError, match="not a text Schema"):
        stats_files.read_schema(str(tmp_path / "bad.pbtxt"))
    with pytest.raises(DatasetError, match="No schema file"):
        stats_files.read_schema(str(tmp_path / "none.pbtxt"))


def test_feature_stats_finds_a_feature_by_name_or_path():
    dataset = statistics("train").datasets[0]
    dataset.features.add(name="legacy")
    assert stats_files.feature_stats(dataset, "label") is dataset.features[0]
    assert stats_files.feature_stats(dataset, "legacy") is dataset.features[1]
    assert stats_files.feature_stats(dataset, "absent") is None


@pytest.mark.parametrize(("steps", "expected"), [
    (["brightness"], "brightness"), (["target/price"], "target/price"),
    (["a.b"], "'a.b'"), (["it's"], "'it''s'"), (["(ext)"], "(ext)"), (["img", "w"], "img.w"),
])
def test_serialized_path_quotes_steps_as_tfdv_does(steps, expected):
    feature = statistics_pb2.FeatureNameStatistics()
    feature.path.step.extend(steps)
    assert stats_files.serialized_path(feature) == expected


def test_ordered_splits_lists_each_split_once_known_ones_first():
    assert contract.ordered_splits(["test", "zeta", "train", "alpha", "test"]) == [
        "train", "test", "alpha", "zeta"]
    assert contract.ordered_splits({"validation": 1, "train": 2}) == ["train", "validation"]
