"""Unit tests of etl/tfrecord_gzip.py: parallel-deflated GZIP TFRecord files."""

from __future__ import annotations

import concurrent.futures
import gzip
import io

import numpy as np
import pytest
import tensorflow as tf

from etl import tfrecord_gzip


def _records(count: int = 400) -> list[bytes]:
    rng = np.random.default_rng(0)
    return [rng.bytes(int(rng.integers(0, 3000))) for _ in range(count)]


def _written(records: list[bytes], level: int, block_bytes: int) -> bytes:
    out = io.BytesIO()
    writer = tfrecord_gzip.GzipRecordWriter(out, level, block_bytes)
    for record in records:
        writer.write(record)
    writer.close()
    assert writer.num_bytes == len(out.getvalue())
    return out.getvalue()


@pytest.mark.parametrize("level", [0, 1, 6, 9])
@pytest.mark.parametrize("block_bytes", [64, 5000, 1 << 20])
def test_gzip_record_writer_reads_back_with_tf_data(tmp_path, level, block_bytes):
    records = _records()
    path = tmp_path / "shard.tfrecord.gz"
    path.write_bytes(_written(records, level, block_bytes))
    dataset = tf.data.TFRecordDataset(str(path), compression_type="GZIP")
    assert [r.numpy() for r in dataset] == records


def test_gzip_record_writer_inflates_to_tensorflows_own_framing(tmp_path):
    records = _records(50)
    plain = tmp_path / "plain.tfrecord"
    with tf.io.TFRecordWriter(str(plain)) as writer:
        for record in records:
            writer.write(record)
    data = _written(records, 6, 1000)
    assert data[:2] == b"\x1f\x8b"
    assert gzip.decompress(data) == plain.read_bytes()


def test_gzip_record_writer_bytes_do_not_depend_on_threads(monkeypatch):
    records = _records()
    monkeypatch.setattr(tfrecord_gzip, "_pool",
                        concurrent.futures.ThreadPoolExecutor(1))
    one_thread = _written(records, 6, 2000)
    monkeypatch.setattr(tfrecord_gzip, "_pool",
                        concurrent.futures.ThreadPoolExecutor(5))
    assert _written(records, 6, 2000) == one_thread


def test_gzip_record_writer_without_records_is_an_empty_gzip_stream():
    assert gzip.decompress(_written([], 6, 100)) == b""


def test_masked_crc32c_matches_the_tfrecord_definition():
    # From TensorFlow's record format: crc32c("") = 0, masked = rotr15 + 0xa282ead8.
    assert tfrecord_gzip.masked_crc32c(b"") == 0xA282EAD8
    crc = 0xE3069283  # crc32c("123456789"), the standard check value
    assert tfrecord_gzip.masked_crc32c(b"123456789") == (
        ((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF
