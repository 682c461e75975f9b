"""Unit tests of etl/image_loading.py: reading, header-only validation, TF error text."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from etl import image_loading
from tests.image_fixtures import _encode

# Never the plain DirectRunner: it first tries to download Prism, which stalls offline.
RUNNER = "apache_beam.runners.portability.fn_api_runner.FnApiRunner"


def _truncated_jpeg() -> bytes:
    data = _encode("jpeg", 40, 40, (10, 20, 30))
    return data[: len(data) // 2]


# --- validate_image_bytes -------------------------------------------------------------

def test_validate_image_bytes_empty():
    assert image_loading.validate_image_bytes(b"") == (
        "empty_file", "File is empty (0 bytes).")


@pytest.mark.parametrize("data", [
    b"this is not an image",
    b"root:x:0:0:root:/root:/bin/bash\n",
    bytes(range(256)),
])
def test_validate_image_bytes_unsupported_format_message_quotes_no_content(data):
    # The same fixed text whatever the bytes: a dead letter never carries the file.
    assert image_loading.validate_image_bytes(data) == (
        "unsupported_format",
        "No known image signature: not a JPEG, PNG, GIF, BMP or WebP file.")


def test_validate_image_bytes_does_not_decode():
    # A truncated JPEG keeps an intact header: the header checks accept it, and the
    # transform's own decode (the only one) rejects it in the shard step.
    assert image_loading.validate_image_bytes(_truncated_jpeg()) is None


@pytest.mark.parametrize("kind", ["png", "jpeg", "gif", "bmp", "png16", "palette"])
def test_validate_image_bytes_good_image_is_none(kind):
    assert image_loading.validate_image_bytes(_encode(kind, 9, 11, (1, 2, 3))) is None


# --- tf_error_detail ------------------------------------------------------------------

def test_tf_error_detail_strips_function_node():
    message = ("{{function_node __wrapped__DecodeImage_device_/job:localhost/replica:0/"
               "task:0/device:CPU:0}} jpeg::Uncompress failed. Invalid JPEG data.")
    assert image_loading.tf_error_detail(message) == (
        "jpeg::Uncompress failed. Invalid JPEG data.")


def test_tf_error_detail_strips_node_brackets():
    message = "Invalid PNG data. [[{{node DecodePng_17}}]] more"
    assert image_loading.tf_error_detail(message) == "Invalid PNG data. more"


def test_tf_error_detail_strips_op_suffix():
    message = "Invalid PNG. Failed to initialize decoder. [Op:DecodeImage] name: foo_3"
    assert image_loading.tf_error_detail(message) == (
        "Invalid PNG. Failed to initialize decoder.")


def test_tf_error_detail_strips_all_parts_and_collapses_whitespace():
    message = ("{{function_node f_1}}  Bad\n data.\t[[{{node n_2}}]]  tail "
               "[Op:DecodeImage] name: x")
    assert image_loading.tf_error_detail(message) == "Bad data. tail"


def test_tf_error_detail_truncates_to_300_characters():
    assert image_loading.tf_error_detail("x" * 1000) == "x" * 300




def test_validate_image_bytes_refuses_large_header_before_decoding(monkeypatch):
    png = tf.io.encode_png(np.zeros((3000, 3000, 1), np.uint8)).numpy()

    def no_decode(data: bytes) -> tuple[int, int]:
        raise AssertionError("decoded an image whose header is over the limit")

    monkeypatch.setattr(image_loading.image_codec, "check_decodable", no_decode)
    reason, _ = image_loading.validate_image_bytes(
        png, image_loading.InputLimits(max_image_pixels=1_000_000))
    assert reason == "image_too_large"


def test_validate_image_bytes_file_too_large():
    data = b"\x89PNG\r\n\x1a\n" + bytes(2000)
    reason, _ = image_loading.validate_image_bytes(
        data, image_loading.InputLimits(max_file_bytes=1000))
    assert reason == "file_too_large"


# --- read_bytes -----------------------------------------------------------------------

@pytest.mark.parametrize("size", [0, 1, 4095, 4096, 4097, 10_000])
def test_read_bytes_returns_the_whole_file_across_chunks(tmp_path, size):
    data = np.random.default_rng(size).integers(0, 256, size, np.uint8).tobytes()
    (tmp_path / "f").write_bytes(data)
    assert image_loading.read_bytes(str(tmp_path / "f"), 1_000_000, chunk_bytes=4096) == data
    assert image_loading.read_bytes(str(tmp_path / "f")) == data


@pytest.mark.parametrize("limit", [4095, 4096, 5000, 9_999])
def test_read_bytes_stops_one_byte_past_the_limit(tmp_path, limit):
    data = np.random.default_rng(0).integers(0, 256, 10_000, np.uint8).tobytes()
    (tmp_path / "f").write_bytes(data)
    assert image_loading.read_bytes(str(tmp_path / "f"), limit, chunk_bytes=4096) == (
        data[:limit + 1])


def test_read_bytes_file_exactly_at_the_limit_is_read_whole(tmp_path):
    (tmp_path / "f").write_bytes(b"x" * 5000)
    data = image_loading.read_bytes(str(tmp_path / "f"), 5000, chunk_bytes=4096)
    assert data == b"x" * 5000
    assert image_loading.validate_image_bytes(
        data, image_loading.InputLimits(max_file_bytes=5000))[0] != "file_too_large"


def test_read_bytes_never_asks_for_more_than_a_chunk(tmp_path, monkeypatch):
    # f.read(n) allocates n bytes up front: asking for --max_file_mb at once cost a
    # 64 MiB allocation per image.
    (tmp_path / "f").write_bytes(b"y" * 3000)
    requested = []
    real_open = image_loading.FileSystems.open

    class Recording:
        def __init__(self, f):
            self._f = f

        def read(self, n=-1):
            requested.append(n)
            return self._f.read(n)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self._f.close()

    monkeypatch.setattr(image_loading.FileSystems, "open",
                        lambda *a, **k: Recording(real_open(*a, **k)))
    assert image_loading.read_bytes(str(tmp_path / "f"), 64 << 20) == b"y" * 3000
    assert requested and max(requested) == image_loading.READ_CHUNK_BYTES


def test_read_bytes_refuses_a_non_positive_chunk(tmp_path):
    (tmp_path / "f").write_bytes(b"x")
    with pytest.raises(ValueError, match="chunk_bytes"):
        image_loading.read_bytes(str(tmp_path / "f"), 10, chunk_bytes=0)


