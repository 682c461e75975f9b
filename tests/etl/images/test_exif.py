"""Unit tests of etl/images/exif.py: reading a JPEG's EXIF orientation, turning pixels upright."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from etl.images import exif
from tests.image_fixtures import _encode, exif_jpeg, pillow_exif_transpose, random_pixels

RGB = (200, 100, 50)


def _orientation(data: bytes) -> int:
    return int(exif.read_orientation(tf.constant(data)))


@pytest.mark.parametrize("endian", [">", "<"])
@pytest.mark.parametrize("orientation", range(1, 9))
def test_read_orientation_reads_the_tag_in_both_byte_orders(orientation, endian):
    data = exif_jpeg(random_pixels(10, 12, 16), orientation, endian)
    # Pillow writes a JFIF APP0 segment, then the EXIF APP1, in the requested order.
    assert data[2:4] == b"\xff\xe0" and data[6:10] == b"JFIF"
    tiff = data.index(b"Exif\0\0") + 6
    assert data[tiff:tiff + 2] == (b"MM" if endian == ">" else b"II")
    assert _orientation(data) == orientation


def test_read_orientation_right_after_soi():
    # Cameras write the EXIF APP1 first, with no JFIF segment.
    data = exif_jpeg(random_pixels(11, 12, 16), 6)
    app0_end = 4 + int.from_bytes(data[4:6], "big")
    assert data[app0_end:app0_end + 2] == b"\xff\xe1"
    assert _orientation(data[:2] + data[app0_end:]) == 6


def _app1(tiff: bytes) -> bytes:
    """An APP1 segment holding ``b"Exif\\0\\0" + tiff`` (test data, by the JPEG and
    EXIF layouts)."""
    payload = b"Exif\0\0" + tiff
    return b"\xff\xe1" + (len(payload) + 2).to_bytes(2, "big") + payload


def _big_endian_tiff(entries: list[tuple[int, int, int, bytes]], ifd_offset: int = 8,
                     magic: int = 42) -> bytes:
    """A big-endian TIFF header and IFD0 with ``(tag, type, count, 4 value bytes)``."""
    body = len(entries).to_bytes(2, "big") + b"".join(
        tag.to_bytes(2, "big") + kind.to_bytes(2, "big") + count.to_bytes(4, "big") + value
        for tag, kind, count, value in entries) + b"\0\0\0\0"
    head = b"MM" + magic.to_bytes(2, "big") + ifd_offset.to_bytes(4, "big")
    return head + b"\0" * (ifd_offset - 8) + body


def _with_segment(segment: bytes, jpeg: bytes | None = None) -> bytes:
    jpeg = jpeg or _encode("jpeg", 8, 8, RGB)
    return jpeg[:2] + segment + jpeg[2:]


SHORT_6 = (0x0112, 3, 1, b"\x00\x06\x00\x00")


def test_read_orientation_of_hand_built_segments():
    # The reference layout parses, so the malformed variants below test the guards.
    assert _orientation(_with_segment(_app1(_big_endian_tiff([SHORT_6])))) == 6
    # A LONG-typed orientation (some writers) is read too.
    assert _orientation(_with_segment(_app1(_big_endian_tiff(
        [(0x0112, 4, 1, b"\x00\x00\x00\x03")])))) == 3
    # IFD0 further into the segment.
    assert _orientation(_with_segment(_app1(_big_endian_tiff([SHORT_6], ifd_offset=40)))) == 6


@pytest.mark.parametrize("data", [
    _encode("jpeg", 8, 8, RGB),                                               # no EXIF
    _encode("png", 8, 8, RGB), _encode("gif", 8, 8, RGB), b"", b"\xff\xd8", b"Exif\0\0",
    _with_segment(_app1(_big_endian_tiff([SHORT_6], magic=43))),             # bad magic
    _with_segment(_app1(b"XX" + _big_endian_tiff([SHORT_6])[2:])),            # byte order
    _with_segment(_app1(b"MM\x00\x2a\xff\xff\xff\xf0"
                        + _big_endian_tiff([SHORT_6])[8:])),                  # far IFD
    _with_segment(_app1(_big_endian_tiff([SHORT_6])[:-10])),                  # cut entry
    _with_segment(_app1(_big_endian_tiff([(0x0112, 3, 1, b"\x00\x09\x00\x00")]))),  # 9
    _with_segment(_app1(_big_endian_tiff([(0x0112, 3, 1, b"\x00\x00\x00\x00")]))),  # 0
    _with_segment(_app1(_big_endian_tiff([(0x0112, 2, 1, b"6\x00\x00\x00")]))),  # ASCII
    _with_segment(_app1(_big_endian_tiff([(0x0112, 3, 2, b"\x00\x06\x00\x06")]))),  # count
    _with_segment(_app1(_big_endian_tiff([(0x0110, 3, 1, b"\x00\x06\x00\x00")]))),  # tag
    # The segment's length field ends it before the IFD entry.
    _with_segment(b"\xff\xe1\x00\x10" + _app1(_big_endian_tiff([SHORT_6]))[4:]),
    # EXIF signature not in an APP1 segment (here in a comment).
    _with_segment(b"\xff\xfe" + _app1(_big_endian_tiff([SHORT_6]))[2:]),
    # An entry count whose IFD would run past the segment.
    _with_segment(_app1(b"MM\x00\x2a\x00\x00\x00\x08\xff\xff"
                        + _big_endian_tiff([SHORT_6])[10:])),
], ids=["no-exif", "png", "gif", "empty", "soi-only", "bare-signature", "magic",
        "byte-order", "far-ifd", "cut-entry", "value-9", "value-0", "ascii-type",
        "count-2", "other-tag", "short-segment", "comment", "huge-count"])
def test_read_orientation_is_1_without_a_valid_tag(data):
    assert _orientation(data) == 1


def test_read_orientation_beyond_the_scanned_head_is_1():
    # An APP1 that starts past the first EXIF_SCAN_BYTES is not read.
    padding = b"\xff\xfe\xff\xff" + b"\0" * 0xFFFD  # one maximal comment segment
    assert len(padding) > exif.EXIF_SCAN_BYTES
    assert _orientation(_with_segment(padding + _app1(_big_endian_tiff([SHORT_6])))) == 1


def test_read_orientation_never_raises_on_mutated_exif():
    # Every byte of the EXIF block set to every "interesting" value in turn.
    data = exif_jpeg(random_pixels(12, 8, 8), 6)
    end = 4 + int.from_bytes(data[4:6], "big")
    for i in range(2, end):
        for value in (0x00, 0x01, 0x7F, 0xFF):
            mutated = data[:i] + bytes([value]) + data[i + 1:]
            assert 1 <= _orientation(mutated) <= 8


@pytest.mark.parametrize("orientation", range(1, 9))
def test_apply_orientation_matchespillow_exif_transpose(orientation):
    pixels = random_pixels(13, 5, 7)
    upright = exif.apply_orientation(tf.constant(pixels), tf.constant(orientation))
    np.testing.assert_array_equal(upright.numpy(), pillow_exif_transpose(pixels, orientation))


@pytest.mark.parametrize("orientation", [0, 9, -3])
def test_apply_orientation_outside_1_to_8_keeps_the_pixels(orientation):
    pixels = random_pixels(14, 5, 7)
    upright = exif.apply_orientation(tf.constant(pixels), tf.constant(orientation))
    np.testing.assert_array_equal(upright.numpy(), pixels)
