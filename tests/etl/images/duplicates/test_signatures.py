"""The three duplicate signatures: SHA-256 of the bytes, XXH3-128 of the upright
pixels, and the 64-bit perceptual hash, pinned against imagehash (an independent
implementation of the same DCT recipe)."""

from __future__ import annotations

import hashlib

import imagehash
import numpy as np
import pytest
import tensorflow as tf
import xxhash
from PIL import Image

from etl.images import codec
from etl.images.duplicates import signatures as image_hashes
from tests.image_fixtures import pillow_exif_transpose, random_pixels

_thumbnails = tf.function(codec.thumbnails)


def thumbnail(pixels: np.ndarray) -> np.ndarray:
    """The grayscale thumbnail the hash reads."""
    return thumbnails(pixels)[0]


def thumbnails(pixels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    grey, colour = _thumbnails(tf.constant(np.ascontiguousarray(pixels)))
    return grey.numpy(), colour.numpy()


def perceptual_hash(thumbnail: np.ndarray) -> tuple[int, bool]:
    """``(phash, blank)`` of one ``uint8 [32, 32]`` thumbnail, as a batch of one."""
    return image_hashes.perceptual_hashes(thumbnail[None])[0]


def phash_hex(pixels: np.ndarray) -> str:
    return f"{perceptual_hash(thumbnail(pixels))[0]:016x}"


def hamming(a: int, b: int) -> int:
    """Differing bits of two hashes."""
    return (a ^ b).bit_count()


def _photos() -> list[np.ndarray]:
    from sklearn.datasets import load_sample_images

    return [np.ascontiguousarray(photo[top:top + h, left:left + w])
            for photo in load_sample_images().images
            for top, left, h, w in ((0, 0, 427, 640), (100, 200, 224, 224),
                                    (37, 11, 301, 157), (200, 300, 64, 96))]


def cell_means(pixels: np.ndarray) -> np.ndarray:
    """Each of the 32 x 32 cells' mean colour (float64), for sides that are
    multiples of 32."""
    n = pixels.shape[0] // 32
    return pixels.astype(np.float64).reshape(32, n, 32, n, 3).mean((1, 3))


def box_thumbnail(pixels: np.ndarray) -> np.ndarray:
    """The recipe's thumbnail computed independently: each cell's mean, then ITU-R
    601 luma, rounded."""
    return np.clip(np.round(cell_means(pixels) @ [0.299, 0.587, 0.114]), 0, 255
                   ).astype(np.uint8)


def _golden_inputs() -> dict[str, np.ndarray]:
    from sklearn.datasets import load_sample_images

    china, flower = load_sample_images().images
    y, x = np.mgrid[0:64, 0:64]
    return {"china_crop": china[100:324, 200:424], "flower_crop": flower[100:324, 200:424],
            "gradient": np.stack([x * 4, y * 4, (x + y) * 2], -1).astype(np.uint8)}


# str(imagehash.phash(Image.fromarray(box_thumbnail(pixels)))), imagehash 4.3.2:
# computed once, with NumPy and imagehash only.
GOLDEN = {"china_crop": "99991cec1c33ccce", "flower_crop": "f5c7d5425503471b",
          "gradient": "802015005008540a"}


def test_perceptual_hash_matches_golden_values_computed_independently():
    inputs = _golden_inputs()
    assert {name: phash_hex(pixels) for name, pixels in inputs.items()} == GOLDEN
    assert {name: str(imagehash.phash(Image.fromarray(box_thumbnail(pixels))))
            for name, pixels in inputs.items()} == GOLDEN


def test_dct_stage_equals_imagehash_on_the_same_thumbnail():
    # imagehash resizes a 32x32 gray image to 32x32 as a copy: on our thumbnail it
    # runs only its DCT and median, which must give our bits exactly.
    for pixels in [*_photos(), random_pixels(0, 50, 40)]:
        small = thumbnail(pixels)
        assert f"{perceptual_hash(small)[0]:016x}" == str(
            imagehash.phash(Image.fromarray(small)))


def test_thumbnail_is_the_mean_of_each_cell_in_luma():
    for pixels in [*_golden_inputs().values(), random_pixels(2, 96, 96)]:
        difference = thumbnail(pixels).astype(int) - box_thumbnail(pixels).astype(int)
        # float32 in the graph, float64 here: a rounding apart at most.
        assert np.abs(difference).max() <= 1


def test_colour_thumbnail_the_quality_measures_read_is_each_cells_mean_colour():
    for pixels in [*_golden_inputs().values(), random_pixels(3, 224, 224)]:
        _, colour = thumbnails(pixels)
        assert colour.shape == (32, 32, 3) and colour.dtype == np.uint8
        difference = colour.astype(int) - np.round(cell_means(pixels)).astype(int)
        assert np.abs(difference).max() <= 1


@pytest.mark.parametrize("orientation", range(1, 9))
def test_orientation_turns_pixels_as_pillow_exif_transpose(orientation):
    pixels = random_pixels(orientation, 5, 7)
    upright = image_hashes.upright(pixels, orientation)
    np.testing.assert_array_equal(upright, pillow_exif_transpose(pixels, orientation))


def test_pixel_hash_is_xxh3_128_of_shape_and_row_major_pixels():
    pixels = random_pixels(3, 4, 6)
    expected = xxhash.xxh3_128(b"4 6 3\n" + pixels.tobytes()).hexdigest()
    assert image_hashes.pixels_xxh128(pixels) == expected
    # A non-contiguous view hashes its values, not its memory.
    flipped = pixels[:, ::-1]
    assert image_hashes.pixels_xxh128(flipped) == xxhash.xxh3_128(
        b"4 6 3\n" + np.ascontiguousarray(flipped).tobytes()).hexdigest()
    # The same bytes in another shape are another image.
    assert image_hashes.pixels_xxh128(pixels.reshape(6, 4, 3)) != expected


@pytest.mark.parametrize("orientation", range(1, 9))
def test_pixel_hash_of_a_turned_view_is_that_of_the_pillow_turned_pixels(orientation):
    pixels = random_pixels(orientation, 9, 14)
    turned = pillow_exif_transpose(pixels, orientation)
    expected = xxhash.xxh3_128(
        f"{turned.shape[0]} {turned.shape[1]} 3\n".encode() + turned.tobytes()).hexdigest()
    assert image_hashes.pixels_xxh128(image_hashes.upright(pixels, orientation)) == expected
    # Channels that are not side by side in memory (every other byte of a wider array).
    spread = np.zeros((9, 14, 6), np.uint8)
    spread[:, :, ::2] = pixels
    assert image_hashes.pixels_xxh128(image_hashes.upright(
        spread[:, :, ::2], orientation)) == expected

def test_batch_hashes_take_each_signature_from_its_own_input():
    data = b"file bytes"
    decoded = random_pixels(5, 8, 10)
    small = thumbnail(_photos()[1])
    (found,) = image_hashes.batch_hashes([data], [decoded], [6], small[None])
    assert found.bytes_sha256 == hashlib.sha256(data).hexdigest()
    assert found.pixels_xxh128 == image_hashes.pixels_xxh128(
        np.ascontiguousarray(pillow_exif_transpose(decoded, 6)))
    assert f"{found.phash:016x}" == str(imagehash.phash(Image.fromarray(small)))
    assert image_hashes.ImageHashes.from_dict(found.to_dict()) == found


def test_flat_images_are_blank_and_textured_ones_are_not():
    assert perceptual_hash(thumbnail(np.full((40, 50, 3), 200, np.uint8)))[1]
    assert perceptual_hash(thumbnail(random_pixels(1, 40, 50)))[1] is False


def test_a_flip_is_far_and_a_resize_is_near():
    photo = _photos()[1]
    phash = int(phash_hex(photo), 16)
    flipped = int(phash_hex(photo[:, ::-1]), 16)
    smaller = np.asarray(Image.fromarray(photo).resize((150, 150), Image.Resampling.BICUBIC))
    assert hamming(phash, flipped) > 16
    assert hamming(phash, int(phash_hex(smaller), 16)) <= 4


def test_sharpness_luma_is_each_cells_mean_in_luma():
    pixels = random_pixels(4, 320, 320)
    luma = tf.function(codec.sharpness_thumbnail)(tf.constant(pixels), 160).numpy()
    cells = pixels.astype(np.float64).reshape(160, 2, 160, 2, 3).mean((1, 3))
    expected = np.round(cells @ [0.299, 0.587, 0.114])
    assert luma.shape == (160, 160) and luma.dtype == np.uint8
    # float32 in the graph, float64 here: a rounding apart at most.
    assert np.abs(luma.astype(int) - expected).max() <= 1


def test_the_statistics_luma_leaves_the_hash_thumbnail_and_stored_image_as_they_are():
    from etl.images.batches import FinishImages
    from etl.images.preprocessing import ImagePreprocessing
    from etl.testing import encode_image

    files = [encode_image(photo, "jpeg") for photo in _photos()[:3]]
    config = ImagePreprocessing()
    with_luma, without = (FinishImages(config, quality=q) for q in (True, False))
    done, plain = (f(f.decode(files), files) for f in (with_luma, without))
    for a, b in zip(done, plain, strict=True):
        assert a.stored == b.stored and a.orientation == b.orientation
        np.testing.assert_array_equal(a.thumbnail, b.thumbnail)
        np.testing.assert_array_equal(a.quality, b.quality)
        assert a.luma.shape == (160, 160) and b.luma.shape == (0, 0)
