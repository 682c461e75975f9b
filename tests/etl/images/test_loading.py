"""Unit tests of etl/images/loading.py: reading, header-only validation, TF error text."""

from __future__ import annotations

import io
import zlib

import numpy as np
import pytest
import tensorflow as tf
from PIL import Image

from etl.core import dead_letters
from etl.core.io import storage
from etl.images import codec, loading
from tests.image_fixtures import KINDS, _encode, corrupt_mid_stream, exif_block, textured_jpeg
from tests.image_loading import validate_image_bytes

# Never the plain DirectRunner: it first tries to download Prism, which stalls offline.
RUNNER = "apache_beam.runners.portability.fn_api_runner.FnApiRunner"


def _truncated_jpeg() -> bytes:
    data = _encode("jpeg", 40, 40, (10, 20, 30))
    return data[: len(data) // 2]


# --- validate_image_bytes -------------------------------------------------------------

def test_validate_image_bytes_empty():
    assert validate_image_bytes(b"") == (
        "empty_file", "File is empty (0 bytes).")


@pytest.mark.parametrize("data", [
    b"this is not an image",
    b"root:x:0:0:root:/root:/bin/bash\n",
    bytes(range(256)),
])
def test_validate_image_bytes_unsupported_format_message_quotes_no_content(data):
    # The same fixed text whatever the bytes: a dead letter never carries the file.
    assert validate_image_bytes(data) == (
        "unsupported_format",
        "No known image signature: not a JPEG, PNG, GIF, BMP or WebP file.")


def test_validate_image_bytes_without_strict_decoding_does_not_decode(monkeypatch):
    # Lenient: only the header is read; the transform's own decode (the only one)
    # decides in the shard step.
    monkeypatch.setattr(loading, "corrupt_data_problem", _no_decode)
    lenient = loading.InputLimits(strict_decoding=False)
    for data in (_truncated_jpeg(), corrupt_mid_stream(textured_jpeg(), seed=0),
                 _encode("gif", 9, 11, (1, 2, 3))):
        assert validate_image_bytes(data, lenient) is None


@pytest.mark.parametrize("kind", [kind for kind, *_ in KINDS])
def test_validate_image_bytes_good_image_is_none(kind):
    assert validate_image_bytes(_encode(kind, 9, 11, (1, 2, 3))) is None


def _no_decode(*args: object) -> None:
    raise AssertionError("decoded an image that must be refused (or kept) before that")


# --- strict decoding: damaged image data ----------------------------------------------

def _pillow_jpeg(mode: str, **options: object) -> bytes:
    pixels = np.asarray(Image.open(io.BytesIO(textured_jpeg())))
    buf = io.BytesIO()
    Image.fromarray(pixels).convert(mode).save(buf, "JPEG", **{"quality": 90, **options})
    return buf.getvalue()


# Valid JPEGs of every kind a strict check could trip on: none may be refused.
VALID_JPEGS = {
    "baseline": lambda: textured_jpeg(),
    "progressive": lambda: textured_jpeg(progressive=True),
    "restart-markers": lambda: textured_jpeg(restart_marker_blocks=4),
    "restart-rows": lambda: textured_jpeg(restart_marker_rows=1),
    "optimized-huffman": lambda: textured_jpeg(optimize=True),
    "4:4:4": lambda: textured_jpeg(subsampling=0),
    "4:2:2": lambda: textured_jpeg(subsampling=1),
    "quality-100": lambda: textured_jpeg(quality=100),
    "odd-size": lambda: textured_jpeg(37, 53),
    "one-pixel": lambda: textured_jpeg(1, 1),
    "grayscale": lambda: _pillow_jpeg("L"),
    "cmyk": lambda: _pillow_jpeg("CMYK"),
    "exif": lambda: textured_jpeg(exif=exif_block(6)),
    "tensorflow": lambda: tf.io.encode_jpeg(np.asarray(Image.open(io.BytesIO(
        textured_jpeg())))).numpy(),
}



@pytest.mark.parametrize("name", sorted(VALID_JPEGS))
def test_strict_decoding_accepts_valid_jpegs(name):
    data = VALID_JPEGS[name]()
    tf.io.decode_image(data)  # TensorFlow reads it too: it is a valid file.
    assert validate_image_bytes(data) is None


def test_strict_decoding_accepts_real_photos():
    from sklearn.datasets import load_sample_images

    for photo in load_sample_images().images:
        for quality, progressive in ((75, False), (95, True)):
            buf = io.BytesIO()
            Image.fromarray(photo).save(buf, "JPEG", quality=quality, progressive=progressive)
            assert validate_image_bytes(buf.getvalue()) is None


@pytest.mark.parametrize("name", ["baseline", "progressive", "restart-markers", "grayscale",
                                  "cmyk"])
def test_strict_decoding_rejects_mid_stream_damage_tensorflow_decodes(name):
    data = corrupt_mid_stream(VALID_JPEGS[name](), seed=0)
    # The silent kind of damage: TensorFlow decodes it, to broken pixels.
    damaged = tf.io.decode_image(data, channels=3).numpy().astype(float)
    intact = tf.io.decode_image(VALID_JPEGS[name](), channels=3).numpy().astype(float)
    assert np.abs(damaged - intact).mean() > 1.0
    reason, message = validate_image_bytes(data)
    assert reason == dead_letters.CORRUPT_IMAGE_DATA
    assert message.startswith("libjpeg reports damaged JPEG data: Corrupt JPEG data: ")
    lenient = loading.InputLimits(strict_decoding=False)
    assert validate_image_bytes(data, lenient) is None


def test_strict_decoding_calls_a_truncated_jpeg_undecodable():
    # The code TensorFlow's decode gives it, so strict or lenient, one reason.
    data = textured_jpeg()
    data = data[: len(data) * 2 // 3]
    with pytest.raises(tf.errors.InvalidArgumentError):
        tf.io.decode_image(data)
    assert validate_image_bytes(data) == (
        dead_letters.UNDECODABLE_IMAGE,
        ("JPEG data ends before the image does (truncated): libjpeg: Premature end of JPEG "
        "file"))


def test_strict_decoding_leaves_jpeg_errors_to_the_transform():
    # A header libjpeg cannot read is an error, not a warning: the transform's
    # decode decides (undecodable_image there), as without the check.
    assert validate_image_bytes(_truncated_jpeg()) is None


def _damaged(data: bytes, seed: int, start: int) -> bytes:
    rng = np.random.default_rng(seed)
    at = int(rng.integers(start, len(data) - 80))
    return data[:at] + rng.integers(0, 256, 64, dtype=np.uint8).tobytes() + data[at + 64:]


def _photo_gif() -> bytes:
    pixels = np.asarray(Image.open(io.BytesIO(textured_jpeg(120, 160))))
    buf = io.BytesIO()
    Image.fromarray(pixels).convert("P", palette=Image.Palette.ADAPTIVE).save(buf, "GIF")
    return buf.getvalue()


def test_strict_decoding_rejects_gif_damage_tensorflow_decodes():
    # Pillow reports LZW damage that TensorFlow's GIF decoder passes over. Over 40
    # seeded damages: every one Pillow reports is refused here, and some of those
    # TensorFlow would have decoded (broken) without an error.
    gif = _photo_gif()
    assert validate_image_bytes(gif) is None
    silent_refused = 0
    for seed in range(40):
        data = _damaged(gif, seed, start=len(gif) // 4)
        problem = validate_image_bytes(data)
        assert validate_image_bytes(
            data, loading.InputLimits(strict_decoding=False)) is None
        if problem is None:
            continue
        reason, message = problem
        assert reason == dead_letters.CORRUPT_IMAGE_DATA
        assert message.startswith("Pillow reports damaged GIF data: ")
        try:
            codec.decode_rgb(tf.constant(data))
            silent_refused += 1
        except tf.errors.InvalidArgumentError:
            pass
    assert silent_refused > 0


def test_tensorflow_refuses_damaged_png_itself():
    # PNG carries CRCs and zlib checksums, and TensorFlow's decoder checks them: no
    # extra check is needed (the transform rejects it as undecodable_image).
    png = tf.io.encode_png(np.asarray(Image.open(io.BytesIO(textured_jpeg())))).numpy()
    for seed in range(10):
        data = _damaged(png, seed, start=len(png) // 4)
        assert validate_image_bytes(data) is None
        with pytest.raises(tf.errors.InvalidArgumentError):
            codec.decode_rgb(tf.constant(data))


def test_damage_tensorflow_cannot_always_see_in_webp_and_bmp():
    # What no check here reports (documented): BMP carries no checksum, so damage
    # past its header always decodes; libwebp (TensorFlow's and Pillow's WebP
    # decoder alike) refuses some damage and decodes the rest.
    pixels = np.asarray(Image.open(io.BytesIO(textured_jpeg())))

    def refused(kind: str, **options: object) -> int:
        buf = io.BytesIO()
        Image.fromarray(pixels).save(buf, kind, **options)
        count = 0
        for seed in range(20):
            data = _damaged(buf.getvalue(), seed, start=len(buf.getvalue()) // 4)
            assert validate_image_bytes(data) is None
            try:
                codec.decode_rgb(tf.constant(data))
            except tf.errors.InvalidArgumentError:
                count += 1
        return count

    assert refused("BMP") == 0
    webp = refused("WEBP", lossless=True) + refused("WEBP", quality=90)
    assert 0 < webp < 40


# --- tf_error_detail ------------------------------------------------------------------

def test_tf_error_detail_strips_function_node():
    message = ("{{function_node __wrapped__DecodeImage_device_/job:localhost/replica:0/"
               "task:0/device:CPU:0}} jpeg::Uncompress failed. Invalid JPEG data.")
    assert loading.tf_error_detail(message) == (
        "jpeg::Uncompress failed. Invalid JPEG data.")


def test_tf_error_detail_strips_node_brackets():
    message = "Invalid PNG data. [[{{node DecodePng_17}}]] more"
    assert loading.tf_error_detail(message) == "Invalid PNG data. more"


def test_tf_error_detail_strips_op_suffix():
    message = "Invalid PNG. Failed to initialize decoder. [Op:DecodeImage] name: foo_3"
    assert loading.tf_error_detail(message) == (
        "Invalid PNG. Failed to initialize decoder.")


def test_tf_error_detail_strips_all_parts_and_collapses_whitespace():
    message = ("{{function_node f_1}}  Bad\n data.\t[[{{node n_2}}]]  tail "
               "[Op:DecodeImage] name: x")
    assert loading.tf_error_detail(message) == "Bad data. tail"


def test_tf_error_detail_truncates_to_300_characters():
    assert loading.tf_error_detail("x" * 1000) == "x" * 300




def _declaring(kind: str, width: int, height: int) -> bytes:
    """A small file of ``kind`` whose header declares ``width x height`` pixels (the
    size fields patched, by the formats' layouts: test data)."""
    if kind == "png":
        data = tf.io.encode_png(np.zeros((8, 8, 1), np.uint8)).numpy()
        ihdr = b"IHDR" + width.to_bytes(4, "big") + height.to_bytes(4, "big") + data[24:29]
        return data[:12] + ihdr + zlib.crc32(ihdr).to_bytes(4, "big") + data[33:]
    if kind == "jpeg":
        data = _encode("jpeg", 8, 8, (1, 2, 3))
        sof = data.index(b"\xff\xc0")
        return (data[:sof + 5] + height.to_bytes(2, "big") + width.to_bytes(2, "big")
                + data[sof + 9:])
    data = _encode("gif", 8, 8, (1, 2, 3))
    return data[:6] + width.to_bytes(2, "little") + height.to_bytes(2, "little") + data[10:]


@pytest.mark.parametrize("kind", ["png", "jpeg", "gif"])
@pytest.mark.parametrize("side", [3000, 60000])
def test_validate_image_bytes_refuses_a_decompression_bomb_before_decoding(
        monkeypatch, kind, side):
    # A few hundred bytes declaring 9 M or 3.6 G pixels: refused from the header,
    # before the strict check's decode or any other.
    data = _declaring(kind, side, side)
    assert len(data) < 1000
    monkeypatch.setattr(loading, "corrupt_data_problem", _no_decode)
    reason, message = validate_image_bytes(
        data, loading.InputLimits(max_image_pixels=1_000_000))
    assert reason == "image_too_large"
    assert message.startswith(f"Header declares {side * side} pixels")


@pytest.mark.parametrize("kind", ["jpeg", "gif"])
def test_strict_decoding_runs_for_images_within_the_limit(monkeypatch, kind):
    # The bomb test's guard has teeth: under the limit, the strict check decodes.
    monkeypatch.setattr(loading, "corrupt_data_problem", _no_decode)
    with pytest.raises(AssertionError, match="decoded an image"):
        validate_image_bytes(_encode(kind, 9, 11, (1, 2, 3)))


def test_validate_image_bytes_file_too_large():
    data = b"\x89PNG\r\n\x1a\n" + bytes(2000)
    reason, _ = validate_image_bytes(
        data, loading.InputLimits(max_file_bytes=1000))
    assert reason == "file_too_large"


# --- reading at most the limit ---------------------------------------------------------

def test_a_file_exactly_at_the_limit_is_read_whole_and_accepted(tmp_path):
    (tmp_path / "f").write_bytes(b"x" * 5000)
    data = storage.read_bytes(str(tmp_path / "f"), 5000)
    assert data == b"x" * 5000
    assert validate_image_bytes(
        data, loading.InputLimits(max_file_bytes=5000))[0] != "file_too_large"


# --- what a decode holds: decode_weight and --decode_budget_mb --------------------------

def _png(mode: str, width: int, height: int) -> bytes:
    buf = io.BytesIO()
    Image.new(mode, (width, height), (9,) * len(mode)).save(buf, "PNG")
    return buf.getvalue()


def test_decode_weight_counts_the_decoded_channels_copies_and_the_resize():
    header = loading.ImageHeader(640 * 480, "RGB", (640, 480))
    # max(3 channels, 3) + 10 bytes a pixel, and the file.
    assert loading.decode_weight(bytes(1000), header) == 1000 + 640 * 480 * 13
    # The resize to 299 x 224 (224 x 640 and 480 x 299 intermediates, float32 RGB; the
    # resized image and two copies).
    assert loading.decode_weight(bytes(1000), header, 224) == (
        1000 + 640 * 480 * 13 + 12 * (480 * 299 + 3 * 224 * 299))


def test_decode_weight_of_alpha_16_bit_and_gray_images():
    def weight(mode: str, composite: bool = False) -> int:
        return loading.decode_weight(b"", loading.ImageHeader(100, mode, (10, 10)),
                                     composite_alpha=composite)

    assert [weight(m) for m in ("L", "LA", "RGB", "RGBA", "I;16", "P")] == [
        1300, 1300, 1300, 1400, 1300, 1400]
    # Compositing on --alpha_background: 36 bytes a pixel more, for an alpha channel.
    assert [weight(m, True) for m in ("LA", "RGBA", "RGB", "L")] == [
        4900, 5000, 1300, 1300]


def test_decode_weight_of_a_jpeg_is_at_its_dct_scale():
    # 4000 x 3000 for 224 px: decoded at 1/4 (750 >= 2 x 224), 1000 x 750.
    jpeg = b"\xff\xd8\xff" + bytes(997)
    header = loading.ImageHeader(4000 * 3000, "RGB", (4000, 3000))
    assert loading.decode_weight(jpeg, header, 224) == (
        1000 + 1000 * 750 * 13 + 12 * (750 * 299 + 3 * 224 * 299))


def test_check_image_weighs_what_its_decode_holds():
    data = _png("RGBA", 300, 200)
    checked = loading.check_image(data, image_size=16)
    assert checked.header == loading.ImageHeader(300 * 200, "RGBA", (300, 200))
    assert checked.weight == loading.decode_weight(data, checked.header, 16)


def test_an_image_whose_decode_exceeds_the_budget_is_refused_naming_the_flag():
    # 2000 x 2000 RGBA of one colour: a few kilobytes, 53 MiB to decode.
    data = _png("RGBA", 2000, 2000)
    assert len(data) < 20_000
    limits = loading.InputLimits(decode_budget_bytes=50 * 2**20)
    assert loading.check_image(data, limits) == (
        dead_letters.IMAGE_TOO_LARGE,
        ("Decoding it (2000 x 2000 RGBA) would hold about 53 MiB at once, above "
         "--decode_budget_mb (50); not decoded."))
    assert isinstance(loading.check_image(
        data, loading.InputLimits(decode_budget_bytes=54 * 2**20)), loading.Checked)


def test_an_unreadable_header_is_weighed_as_the_largest_image_up_to_the_budget():
    # A PNG signature Pillow cannot read: TensorFlow's decode decides, alone.
    data = b"\x89PNG\r\n\x1a\n" + bytes(100)
    assert loading.check_image(data).weight == len(data) + loading.DEFAULT_MAX_IMAGE_PIXELS * 14
    small = loading.InputLimits(decode_budget_bytes=2**20)
    assert loading.check_image(data, small).weight == 2**20


def test_the_decode_budget_must_be_positive():
    with pytest.raises(ValueError, match="--decode_budget_mb must be positive, got 0 MiB"):
        loading.InputLimits(decode_budget_bytes=0)
