"""Taking records out of a written shard (``--cross_split_duplicates=drop``), on a local
disk and on a real GCS server: the copy holds the other records, byte for byte the
shard written without them, and the original goes."""

from __future__ import annotations

import os

import pytest
import tensorflow as tf

from etl.core.io import storage
from etl.core.shards import placement
from etl.core.shards.files import ShardFormat, ShardWriter
from etl.core.shards.removal import Removal, kept_relpath, remove_records
from reader.format import contract

RECORDS = [f"record {i} ".encode() * (i + 1) for i in range(6)]
LABELS = ["cat", "dog", "cat", "cat", "dog", "cat"]
PENDING = "train/pending-train-00000.tfrecord.gz"


@pytest.fixture(params=["local", "gcs"])
def root(request, tmp_path) -> str:
    if request.param == "local":
        return str(tmp_path / "out")
    return f"{request.getfixturevalue('gcs_bucket').url}/out"


def _write(root: str, relpath: str, records: list[bytes], labels: list[str],
           shard_format: ShardFormat) -> placement.ShardResult:
    with ShardWriter(storage.join(root, relpath), shard_format) as writer:
        for record in records:
            writer.write(record)
    counts = {label: labels.count(label) for label in sorted(set(labels))}
    return placement.ShardResult.of("train", 0, relpath, writer, counts.items())


def _read(path: str, shard_format: ShardFormat, tmp_path) -> list[bytes]:
    """The file's records as TensorFlow reads them (from a local copy of its bytes)."""
    local = os.path.join(tmp_path, "copy.tfrecord")
    with open(local, "wb") as f:
        f.write(storage.read_bytes(path))
    compression = "GZIP" if shard_format.compression == contract.GZIP else ""
    return [r.numpy() for r in tf.data.TFRecordDataset(local, compression_type=compression)]


@pytest.mark.parametrize("compression", [contract.GZIP, contract.NO_COMPRESSION])
def test_a_shard_loses_exactly_the_named_records(root, tmp_path, compression):
    shard_format = ShardFormat(compression=compression)
    written = _write(root, PENDING, RECORDS, LABELS, shard_format)
    removal = Removal("train", 0, (1, 3), ("dog", "cat"))
    result = remove_records(written, {("train", 0): removal}, root, shard_format)
    kept = [r for i, r in enumerate(RECORDS) if i not in removal.positions]
    assert result.path == kept_relpath(PENDING)
    assert _read(storage.join(root, result.path), shard_format, tmp_path) == kept
    assert (result.num_records, dict(result.label_counts)) == (4, {"cat": 3, "dog": 1})
    # The pending file (and its record index) is gone.
    assert not storage.exists(storage.join(root, PENDING))
    if shard_format.indexed:
        assert not storage.exists(contract.index_relpath(storage.join(root, PENDING)))
    # Byte for byte the shard written without those records.
    alone = _write(root, "alone.tfrecord.gz", kept,
                   [label for i, label in enumerate(LABELS) if i not in (1, 3)], shard_format)
    assert (result.sha256, result.num_bytes) == (alone.sha256, alone.num_bytes)
    assert result.index == alone.index


def test_a_shard_without_removals_is_left_alone(tmp_path):
    shard_format = ShardFormat()
    written = _write(str(tmp_path), PENDING, RECORDS, LABELS, shard_format)
    other = Removal("validation", 0, (0,), ("cat",))
    assert remove_records(written, {("validation", 0): other}, str(tmp_path),
                          shard_format) is written
    assert storage.exists(storage.join(str(tmp_path), PENDING))


def test_a_position_beyond_the_shard_is_refused(tmp_path):
    shard_format = ShardFormat()
    written = _write(str(tmp_path), PENDING, RECORDS, LABELS, shard_format)
    with pytest.raises(ValueError, match="holds 6"):
        remove_records(written, {("train", 0): Removal("train", 0, (6,))}, str(tmp_path),
                       shard_format)
