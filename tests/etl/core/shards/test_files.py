"""Shard files: uncompressed ones and their record index, GZIP ones at each level."""

from __future__ import annotations

import concurrent.futures
import gzip
import hashlib
import io
import os
import struct
import zlib

import pytest
import tensorflow as tf

from etl.core.shards import placement
from etl.core.shards.files import (
    BlockWriter,
    FrameChunks,
    ShardFormat,
    ShardWriter,
    deflate_level,
)
from reader.format import contract, record_index

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
        relpath = placement.pending_relpath("ds", "train", shard, contract.NO_COMPRESSION)
        with ShardWriter(os.path.join(out, relpath), NONE) as writer:
            writer.write_all(_records(shard + 1))
        results.append(placement.ShardResult.of("train", shard, relpath, writer))
    entries = placement.finalize_shards(results, out, "ds", contract.NO_COMPRESSION)
    assert sorted(os.listdir(tmp_path / "train")) == [
        "ds-train-00000-of-00002.tfrecord", "ds-train-00000-of-00002.tfrecord.idx",
        "ds-train-00001-of-00002.tfrecord", "ds-train-00001-of-00002.tfrecord.idx"]
    fields = entries[1].file_fields()
    index_path = os.path.join(out, fields["index"]["path"])
    assert fields["index"]["path"] == "train/ds-train-00001-of-00002.tfrecord.idx"
    with open(index_path, "rb") as f:
        assert hashlib.sha256(f.read()).hexdigest() == fields["index"]["sha256"]
    assert fields["num_records"] == 5


def _write_gzip(path: str, records: list[bytes], level: int, block: int) -> bytes:
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        with ShardWriter(path, ShardFormat(gzip_level=level)) as writer, BlockWriter(
                writer, pool) as blocks:
            for first in range(0, len(records), block):
                blocks.write(records[first:first + block])
    with open(path, "rb") as f:
        return f.read()


@pytest.mark.parametrize("level", range(10))
def test_a_gzip_shard_holds_tensorflows_frames_the_same_bytes_however_blocked(tmp_path,
                                                                              level):
    """At every level the GZIP stream inflates (Python's gzip) to exactly the frames
    tf.io.TFRecordWriter writes, TensorFlow reads it back, and its bytes depend on
    the records and the level alone, not on how they were handed to the writer."""
    records = [*_records(3000), b""]
    data = _write_gzip(str(tmp_path / "a.tfrecord.gz"), records, level, 37)
    assert data == _write_gzip(str(tmp_path / "b.tfrecord.gz"), records, level, 1000)
    with tf.io.TFRecordWriter(str(tmp_path / "tf.tfrecord")) as reference:
        for record in records:
            reference.write(record)
    assert gzip.decompress(data) == (tmp_path / "tf.tfrecord").read_bytes()
    assert data[:10] == b"\x1f\x8b\x08\x00\x00\x00\x00\x00" + data[8:10]  # mtime 0, no name
    read = tf.data.TFRecordDataset(str(tmp_path / "a.tfrecord.gz"), compression_type="GZIP")
    assert [r.numpy() for r in read] == records


def _python_gzip(raw: bytes, level: int) -> bytes:
    """``raw`` as Python's ``gzip`` writes it in one piece (no name, mtime 0)."""
    out = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", compresslevel=level, fileobj=out,
                       mtime=0) as f:
        f.write(raw)
    return out.getvalue()


@pytest.mark.parametrize("level", [7, 8, 9])
def test_levels_7_to_9_are_pythons_gzip_as_before(tmp_path, level):
    """Levels 7-9 are zlib's stream, byte for byte what the jobs wrote before levels
    1-6 went to ISA-L (level 0, stored, is still Python's gzip too)."""
    records = _records(3000)
    data = _write_gzip(str(tmp_path / "s.tfrecord.gz"), records, level, 50)
    assert data == _python_gzip(gzip.decompress(data), level)


def test_levels_1_to_6_deflate_with_isal_at_two_levels(tmp_path):
    """zlib's 1-3 and 4-6 are ISA-L's 1 and 3: each group writes one stream, not
    zlib's, and it shrinks the records about as much as zlib's level 1."""
    records = _records(3000)
    data = {level: _write_gzip(str(tmp_path / f"{level}.gz"), records, level, 100)
            for level in range(1, 7)}
    assert len({data[level] for level in (1, 2, 3)}) == 1
    assert len({data[level] for level in (4, 5, 6)}) == 1
    raw = gzip.decompress(data[1])
    for level in (1, 6):
        assert data[level] != _python_gzip(raw, level)
        assert len(data[level]) < len(raw)
    assert len(data[1]) <= 1.1 * len(zlib.compress(raw, 1))
    assert [deflate_level(level) for level in range(10)] == [
        None, 1, 1, 1, 3, 3, 3, None, None, None]


class _Chunks(io.RawIOBase):
    """A raw stream that keeps each write it is handed, as its own chunk."""

    def __init__(self) -> None:
        super().__init__()
        self.chunks: list[bytes] = []

    def writable(self) -> bool:
        return True

    def write(self, data) -> int:
        self.chunks.append(bytes(data))
        return len(data)


@pytest.mark.parametrize("block", [1, 7, 250, 10_000])
def test_frames_reach_the_deflate_in_the_chunks_a_buffered_writer_makes_of_them(block):
    """ISA-L's bytes depend on how its input is cut: blocks of frames are cut into
    exactly the chunks io.BufferedWriter makes when handed one frame at a time (whole
    frames up to the chunk size, a larger frame alone), however they are blocked."""
    records = [bytes([i % 251]) * (i * 7919 % 5000) for i in range(3000)]
    records[100] = b"x" * 70_000  # larger than a chunk, with a chunk begun before it
    records[101] = b"y" * 65_536 + b"z"
    chunk = 64 * 1024
    frames = [record_index.frames([r]) for r in records]
    assert b"".join(frames) == record_index.frames(records)
    expected = _Chunks()
    buffered = io.BufferedWriter(expected, buffer_size=chunk)
    for frame in frames:
        buffered.write(frame)
    buffered.flush()
    got = _Chunks()
    chunks = FrameChunks(got, chunk)
    for first in range(0, len(records), block):
        part = records[first:first + block]
        chunks.write(record_index.frames(part), [len(r) for r in part])
    chunks.flush()
    assert len(expected.chunks) > 20
    assert got.chunks == expected.chunks
