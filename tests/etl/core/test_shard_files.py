"""Uncompressed shard files and their record index (``--compression=none``)."""

from __future__ import annotations

import concurrent.futures
import hashlib
import os
import struct

import pytest
import tensorflow as tf

from etl.core import sharding
from etl.core.shard_files import BlockWriter, ShardFormat, ShardWriter
from reader import contract

NONE = ShardFormat(compression=contract.NO_COMPRESSION)


def _records(n: int) -> list[bytes]:
    return [bytes([i % 251]) * (i * 37 % 1000) for i in range(n)]


def _frames_of(data: bytes) -> list[tuple[int, int]]:
    """(offset, length) of every TFRecord frame, found by walking the length fields:
    the way the ``tfrecord`` package's ``create_index`` and DALI's ``tfrecord2idx``
    build their indexes."""
    frames, offset = [], 0
    while offset < len(data):
        (length,) = struct.unpack_from("<Q", data, offset)
        frames.append((offset, length + 16))
        offset += length + 16
    return frames


def test_uncompressed_shard_is_tensorflows_own_bytes_with_an_index_of_its_frames(tmp_path):
    records = [*_records(300), b""]
    path = str(tmp_path / "s.tfrecord")
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        with ShardWriter(path, NONE) as writer, BlockWriter(writer, pool) as blocks:
            for first in range(0, len(records), 37):
                blocks.write(records[first:first + 37])
    with tf.io.TFRecordWriter(str(tmp_path / "tf.tfrecord")) as reference:
        for record in records:
            reference.write(record)
    data = (tmp_path / "s.tfrecord").read_bytes()
    assert data == (tmp_path / "tf.tfrecord").read_bytes()
    index = (tmp_path / f"s.tfrecord{contract.INDEX_SUFFIX}").read_bytes()
    assert index.decode().splitlines() == [f"{o} {n}" for o, n in _frames_of(data)]
    assert (writer.num_records, writer.num_bytes) == (len(records), len(data))
    assert writer.sha256 == hashlib.sha256(data).hexdigest()
    assert (writer.index.num_bytes, writer.index.sha256) == (
        len(index), hashlib.sha256(index).hexdigest())


def test_gzip_shard_has_no_index(tmp_path):
    with ShardWriter(str(tmp_path / "s.tfrecord.gz"), ShardFormat()) as writer:
        writer.write_all(_records(3))
    assert writer.index is None
    assert os.listdir(tmp_path) == ["s.tfrecord.gz"]


def test_no_record_and_a_failed_write_leave_neither_shard_nor_index(tmp_path):
    with ShardWriter(str(tmp_path / "empty.tfrecord"), NONE) as empty:
        pass
    with pytest.raises(TypeError):
        with ShardWriter(str(tmp_path / "bad.tfrecord"), NONE) as writer:
            writer.write(b"fine")
            writer.write(None)  # type: ignore[arg-type]
    assert (empty.num_records, empty.index) == (0, None)
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("flags", [{"compression": "zstd"}, {"gzip_level": 11}])
def test_shard_format_refuses_what_it_cannot_write(flags):
    with pytest.raises(ValueError, match=r"--compression must be one of|--gzip_level"):
        ShardFormat(**flags)


def test_finalize_renames_each_index_with_its_shard(tmp_path):
    out = str(tmp_path)
    results = []
    for shard in (4, 1):
        relpath = sharding.pending_relpath("ds", "train", shard, contract.NO_COMPRESSION)
        with ShardWriter(os.path.join(out, relpath), NONE) as writer:
            writer.write_all(_records(shard + 1))
        results.append(sharding.ShardResult.of("train", shard, relpath, writer))
    entries = sharding.finalize_shards(results, out, "ds", contract.NO_COMPRESSION)
    assert sorted(os.listdir(tmp_path / "train")) == [
        "ds-train-00000-of-00002.tfrecord", "ds-train-00000-of-00002.tfrecord.idx",
        "ds-train-00001-of-00002.tfrecord", "ds-train-00001-of-00002.tfrecord.idx"]
    fields = entries[1].file_fields()
    index_path = os.path.join(out, fields["index"]["path"])
    assert fields["index"]["path"] == "train/ds-train-00001-of-00002.tfrecord.idx"
    with open(index_path, "rb") as f:
        assert hashlib.sha256(f.read()).hexdigest() == fields["index"]["sha256"]
    assert fields["num_records"] == 5
