"""Unit tests of etl/images/codec.py: sniffing, decoding, resize/crop and stored encodings."""

from __future__ import annotations

import io

import numpy as np
import pytest
import tensorflow as tf
from PIL import Image

from etl.images import codec
from reader.tfdata.decoding import decode_stored_image
from tests.image_fixtures import _encode, exif_jpeg, pillow_exif_transpose, random_pixels

RGB = (200, 100, 50)


def _decode(data: bytes) -> np.ndarray:
    return codec.decode_rgb(tf.constant(data)).numpy()


# --- sniff_format ---------------------------------------------------------------------

@pytest.mark.parametrize(("kind", "expected"), [
    ("jpeg", "jpeg"), ("jpeg_progressive", "jpeg"), ("png", "png"), ("png16", "png"),
    ("gif", "gif"), ("bmp", "bmp"), ("webp", "webp"), ("webp_alpha", "webp"),
])
def test_sniff_format_recognises_encoded_images(kind, expected):
    assert codec.sniff_format(_encode(kind, 8, 8, RGB)) == expected


def test_sniff_format_recognises_gif87a_header():
    assert codec.sniff_format(b"GIF87a" + b"\x00" * 10) == "gif"


@pytest.mark.parametrize("data", [
    b"", b"this is not an image", b"\xff\xd8", b"\x89PNG\r\n", b"RIFF\x00\x00\x00\x00WAVE",
    b"RIFF....WEB", b"%PDF-1.4",
])
def test_sniff_format_returns_none_for_garbage(data):
    assert codec.sniff_format(data) is None


def test_sniff_format_ignores_what_the_name_would_say():
    # Content decides: a PNG is a PNG whatever it is called, so only bytes go in.
    assert codec.sniff_format(_encode("png", 4, 4, RGB)[:8]) == "png"


# --- decode_rgb -----------------------------------------------------------------------

def test_decode_rgb_keeps_rgb_pixels():
    pixels = random_pixels(0, 5, 7)
    decoded = _decode(tf.io.encode_png(pixels).numpy())
    assert decoded.dtype == np.uint8
    np.testing.assert_array_equal(decoded, pixels)


def test_decode_rgb_replicates_gray_to_three_channels():
    decoded = _decode(_encode("gray", 6, 9, (90, 90, 90)))
    assert decoded.shape == (6, 9, 3)
    assert (decoded == 90).all()


def test_decode_rgb_drops_alpha_without_compositing():
    decoded = _decode(_encode("rgba", 6, 9, RGB))  # alpha 77 everywhere
    assert decoded.shape == (6, 9, 3)
    assert (decoded == RGB).all()


def test_decode_rgb_expands_palette():
    decoded = _decode(_encode("palette", 6, 9, RGB))
    assert decoded.shape == (6, 9, 3)
    assert (decoded == RGB).all()


def test_decode_rgb_keeps_high_byte_of_16_bit_png():
    # High byte 200 with low byte 255: rounding or scaling to 8 bits would give 201.
    samples = np.full((4, 5, 3), 200 * 256 + 255, np.uint16)
    samples[..., 1] = 100 * 256 + 128
    samples[..., 2] = 50 * 256 + 0
    decoded = _decode(tf.io.encode_png(samples).numpy())
    assert decoded.shape == (4, 5, 3)
    assert (decoded == RGB).all()


def test_decode_rgb_keeps_first_gif_frame():
    decoded = _decode(_encode("gif", 6, 9, RGB))  # second frame is (1, 2, 3)
    assert decoded.shape == (6, 9, 3)
    assert (decoded == RGB).all()


def test_decode_rgb_reads_bmp():
    assert (_decode(_encode("bmp", 6, 9, RGB)) == RGB).all()


def test_decode_rgb_reads_webp():
    decoded = _decode(_encode("webp", 6, 9, RGB))
    assert decoded.shape == (6, 9, 3)
    assert (decoded == RGB).all()


def test_decode_rgb_rejects_garbage():
    with pytest.raises(tf.errors.InvalidArgumentError):
        _decode(b"this is not an image")


# --- resize_and_center_crop -----------------------------------------------------------

@pytest.mark.parametrize(("height", "width"), [
    (100, 300),  # landscape
    (300, 100),  # portrait
    (64, 64),    # square, shrink
    (32, 32),    # square, already the size
    (3, 5),      # tiny: upscaled
    (1, 1),      # a single pixel
    (7, 200),    # very wide and short: upscaled on the short side
])
def test_resize_and_center_crop_output_shape(height, width):
    out = codec.resize_and_center_crop(tf.constant(random_pixels(1, height, width)), 32)
    assert out.dtype == tf.uint8
    assert tuple(out.shape) == (32, 32, 3)


def test_resize_and_center_crop_keeps_a_solid_colour_exactly():
    solid = np.broadcast_to(np.array(RGB, np.uint8), (45, 70, 3))
    out = codec.resize_and_center_crop(tf.constant(solid), 16).numpy()
    assert (out == RGB).all()


def test_resize_and_center_crop_same_size_is_identity():
    pixels = random_pixels(2, 16, 16)
    out = codec.resize_and_center_crop(tf.constant(pixels), 16).numpy()
    np.testing.assert_array_equal(out, pixels)


def test_resize_and_center_crop_crops_the_centre_of_a_wide_image():
    # 300×100 (w × h), thirds pure red / green / blue, to 32: the short side scales by
    # 100/32 = 3.125, the long side to round(300 * 32 / 100) = 96, and the crop takes
    # columns 32..63 of the 96, exactly the green third. The antialiasing kernel spans
    # more than one input pixel, so the first and last crop columns blend in a little
    # red / blue from the neighbouring thirds; the 30 inner columns must be pure green.
    image = np.zeros((100, 300, 3), np.uint8)
    image[:, :100] = (255, 0, 0)
    image[:, 100:200] = (0, 255, 0)
    image[:, 200:] = (0, 0, 255)
    out = codec.resize_and_center_crop(tf.constant(image), 32).numpy()
    assert (out[:, 1:31] == (0, 255, 0)).all()
    # Edge columns: green dominates and only the adjacent third bleeds in.
    left, right = out[:, 0], out[:, 31]
    assert (left[:, 1] > 200).all() and (left[:, 2] == 0).all()
    assert (right[:, 1] > 200).all() and (right[:, 0] == 0).all()


def test_resize_and_center_crop_crops_the_centre_of_a_tall_image():
    # Transposed case: top / middle / bottom thirds, the crop keeps the middle one.
    image = np.zeros((300, 100, 3), np.uint8)
    image[:100] = (255, 0, 0)
    image[100:200] = (0, 255, 0)
    image[200:] = (0, 0, 255)
    out = codec.resize_and_center_crop(tf.constant(image), 32).numpy()
    assert (out[1:31] == (0, 255, 0)).all()


@pytest.mark.parametrize(("height", "width", "size"), [
    (480, 640, 224),  # a web photo's decode: shrink
    (333, 251, 64),   # odd sides, portrait
    (5, 9, 16),       # upscale
])
def test_resize_and_center_crop_is_tf_image_resize_of_a_float_copy_bit_for_bit(
        height, width, size):
    # The resize reads the uint8 pixels as they are; tf.image.resize, the public op it
    # stands for, takes a float32 copy of them first. Same values, same sums.
    pixels = random_pixels(4, height, width)
    shorter = min(height, width)
    new_h, new_w = ((side * size + shorter // 2) // shorter for side in (height, width))
    resized = tf.image.resize(tf.cast(pixels, tf.float32), [new_h, new_w],
                              method="bilinear", antialias=True).numpy()
    top, left = (new_h - size) // 2, (new_w - size) // 2
    expected = np.clip(np.round(resized[top:top + size, left:left + size]), 0, 255)
    out = codec.resize_and_center_crop(tf.constant(pixels), size).numpy()
    np.testing.assert_array_equal(out, expected.astype(np.uint8))


# --- encode / decode_stored -----------------------------------------------------------

@pytest.mark.parametrize("image_format", [codec.PNG, codec.RAW])
def test_encode_decode_stored_round_trip_is_exact(image_format):
    pixels = random_pixels(3, 12, 12)
    encoded = codec.encode(tf.constant(pixels), image_format, 90)
    decoded = decode_stored_image(encoded, image_format, 12).numpy()
    np.testing.assert_array_equal(decoded, pixels)


def test_encode_raw_is_row_major_pixel_bytes():
    pixels = random_pixels(4, 3, 4)
    encoded = codec.encode(tf.constant(pixels), codec.RAW, 90).numpy()
    assert encoded == pixels.tobytes()


def test_encode_raw_keeps_trailing_zero_bytes():
    pixels = np.zeros((2, 2, 3), np.uint8)
    encoded = codec.encode(tf.constant(pixels), codec.RAW, 90).numpy()
    assert encoded == b"\x00" * 12


def test_encode_png_is_a_png_file():
    encoded = codec.encode(tf.constant(random_pixels(5, 4, 4)), codec.PNG, 90).numpy()
    assert codec.sniff_format(encoded) == "png"


def test_encode_decode_stored_jpeg_is_close():
    # Smooth content: JPEG (4:2:0 chroma) stays within a few levels of the input.
    ramp = np.linspace(32, 224, 32, dtype=np.float32)
    pixels = np.stack(np.broadcast_arrays(ramp[None, :], ramp[:, None],
                                          np.full((32, 32), 128.0, np.float32)), -1)
    pixels = pixels.astype(np.uint8)
    encoded = codec.encode(tf.constant(pixels), codec.JPEG, 90)
    assert codec.sniff_format(encoded.numpy()) == "jpeg"
    decoded = decode_stored_image(encoded, codec.JPEG, 32).numpy()
    assert decoded.shape == (32, 32, 3)
    diff = np.abs(decoded.astype(int) - pixels.astype(int))
    assert diff.max() <= 12
    assert diff.mean() <= 2.0


def test_encode_jpeg_quality_changes_the_bytes():
    pixels = tf.constant(random_pixels(8, 32, 32))
    low = codec.encode(pixels, codec.JPEG, 20).numpy()
    high = codec.encode(pixels, codec.JPEG, 95).numpy()
    assert len(low) < len(high)


def test_encode_rejects_unknown_format():
    with pytest.raises(ValueError, match="Unknown image format 'webp'"):
        codec.encode(tf.constant(random_pixels(6, 2, 2)), "webp", 90)


def test_decode_stored_rejects_unknown_format():
    with pytest.raises(ValueError, match="Unknown image format 'gif'"):
        decode_stored_image(tf.constant(b""), "gif", 2)


def test_decode_stored_raw_with_wrong_size_fails():
    encoded = codec.encode(tf.constant(random_pixels(7, 4, 4)), codec.RAW, 90)
    with pytest.raises(tf.errors.InvalidArgumentError):
        decode_stored_image(encoded, codec.RAW, 5)


def test_preprocess_chains_decode_resize_crop_encode():
    out = codec.preprocess(tf.constant(_encode("png", 40, 60, RGB)), 8,
                                 codec.RAW, 90).numpy()
    assert out == bytes(RGB) * 64


@pytest.mark.parametrize("kind", ["jpeg", "png", "gif", "bmp", "gray", "rgba"])
def test_decode_rgb_gives_height_and_width_of_every_format(kind):
    assert tuple(codec.decode_rgb(tf.constant(_encode(kind, 13, 21, RGB))).shape) == (
        13, 21, 3)


@pytest.mark.parametrize("kind", ["jpeg", "png"])
def test_decode_rgb_raises_on_truncated_data(kind):
    data = _encode(kind, 40, 40, RGB)
    with pytest.raises(tf.errors.InvalidArgumentError):
        codec.decode_rgb(tf.constant(data[: len(data) // 2]))


@pytest.mark.parametrize("orientation", range(1, 9))
def test_resize_and_center_crop_orientation_equals_turning_first_up_to_rounding(
        orientation):
    # The resized image is turned, not the decoded one: the same up to float
    # rounding of the separable resize (documented: at most 1 level).
    pixels = random_pixels(17, 61, 47)
    first = codec.resize_and_center_crop(
        tf.constant(pillow_exif_transpose(pixels, orientation)), 16).numpy().astype(int)
    after = codec.resize_and_center_crop(tf.constant(pixels), 16,
                                               tf.constant(orientation)).numpy().astype(int)
    assert np.abs(first - after).max() <= 1
    assert (first != after).mean() < 0.01


@pytest.mark.parametrize("orientation", range(1, 9))
def test_preprocess_turns_an_oriented_jpeg_upright(orientation):
    # 12 x 20 stored, PNG-encoded output of size 12: the 90° orientations store the
    # upright image's 12-wide centre of a 20 x 12 frame. Flat colour regions: exact.
    pixels = np.zeros((12, 20, 3), np.uint8)
    pixels[:, :10] = (250, 0, 0)
    pixels[:6, 10:] = (0, 250, 0)
    pixels[6:, 10:] = (0, 0, 250)
    data = exif_jpeg(pixels, orientation)
    stored = codec.decode_rgb(tf.constant(data)).numpy()
    expected = codec.resize_and_center_crop(
        tf.constant(pillow_exif_transpose(stored, orientation)), 12).numpy()
    out = codec.preprocess(tf.constant(data), 12, codec.PNG, 95).numpy()
    np.testing.assert_array_equal(tf.io.decode_png(out).numpy(), expected)
    kept = codec.preprocess(tf.constant(data), 12, codec.PNG, 95,
                                  apply_exif_orientation=False).numpy()
    np.testing.assert_array_equal(
        tf.io.decode_png(kept).numpy(),
        codec.resize_and_center_crop(tf.constant(stored), 12).numpy())


# --- alpha ----------------------------------------------------------------------------

def _rgba_pixels() -> np.ndarray:
    rgba = random_pixels(15, 6, 9)
    return np.concatenate([rgba, np.random.default_rng(16).integers(
        0, 256, (6, 9, 1), dtype=np.uint8)], -1)


def _composited(rgba: np.ndarray, background: tuple[int, int, int]) -> np.ndarray:
    # The documented rule in float64: c * a/255 + bg * (1 - a/255), to nearest.
    alpha = rgba[..., 3:].astype(np.float64) / 255
    mixed = rgba[..., :3] * alpha + np.array(background, np.float64) * (1 - alpha)
    return np.rint(mixed).astype(np.uint8)


def _save(image: Image.Image, kind: str, **options: object) -> bytes:
    buf = io.BytesIO()
    image.save(buf, kind, **options)
    return buf.getvalue()


@pytest.mark.parametrize("kind,options", [
    ("PNG", {}), ("WEBP", {"lossless": True, "exact": True})])
def test_decode_rgb_composites_alpha_on_the_background(kind, options):
    rgba = _rgba_pixels()
    data = _save(Image.fromarray(rgba, "RGBA"), kind, **options)
    background = (255, 250, 10)
    decoded = codec.decode_rgb(tf.constant(data), alpha_background=background)
    np.testing.assert_array_equal(decoded.numpy(), _composited(rgba, background))
    # Default: the alpha channel is dropped, the stored colour kept.
    np.testing.assert_array_equal(_decode(data), rgba[..., :3])


def test_decode_rgb_composites_gray_with_alpha():
    rgba = _rgba_pixels()
    gray_alpha = np.stack([rgba[..., 0], rgba[..., 3]], -1)
    data = _save(Image.fromarray(gray_alpha, "LA"), "PNG")
    expected = _composited(np.concatenate([np.repeat(gray_alpha[..., :1], 3, -1),
                                           gray_alpha[..., 1:]], -1), (0, 0, 255))
    decoded = codec.decode_rgb(tf.constant(data), alpha_background=(0, 0, 255))
    np.testing.assert_array_equal(decoded.numpy(), expected)


def test_decode_rgb_composites_a_palette_transparency():
    # Palette index 0 transparent (tRNS): those pixels become the background.
    pixels = np.zeros((4, 6), np.uint8)
    pixels[:, 3:] = 1
    image = Image.fromarray(pixels, "P")
    image.putpalette([200, 100, 50, 10, 20, 30] + [0] * 762)
    data = _save(image, "PNG", transparency=0)
    decoded = codec.decode_rgb(tf.constant(data), alpha_background=(9, 9, 9)).numpy()
    assert (decoded[:, :3] == (9, 9, 9)).all() and (decoded[:, 3:] == (10, 20, 30)).all()


@pytest.mark.parametrize("kind", ["jpeg", "png", "gray", "bmp", "gif"])
def test_decode_rgb_background_leaves_opaque_images_alone(kind):
    data = _encode(kind, 6, 9, (90, 90, 90))
    np.testing.assert_array_equal(
        codec.decode_rgb(tf.constant(data), alpha_background=(255, 0, 0)).numpy(),
        _decode(data))


def test_decode_rgb_reads_webp_with_alpha():
    # tf.io.decode_image(channels=3) refuses a WebP with alpha; it is decoded whole
    # and its alpha dropped like any other.
    decoded = _decode(_encode("webp_alpha", 6, 9, RGB))
    assert decoded.shape == (6, 9, 3)
    assert (decoded == RGB).all()
