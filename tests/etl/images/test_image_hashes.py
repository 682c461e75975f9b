"""The three duplicate signatures: SHA-256 of bytes and of upright pixels, and the
64-bit perceptual hash, pinned against imagehash (an independent implementation)."""

from __future__ import annotations

import hashlib

import imagehash
import numpy as np
import pytest
from PIL import Image

from etl.images import image_hashes
from tests.image_fixtures import pillow_exif_transpose, random_pixels


def _photos() -> list[np.ndarray]:
    from sklearn.datasets import load_sample_images

    photos = load_sample_images().images
    crops = [photo[top:top + h, left:left + w] for photo in photos
             for top, left, h, w in ((0, 0, 427, 640), (100, 200, 224, 224),
                                     (37, 11, 301, 157), (200, 300, 64, 96))]
    return [np.ascontiguousarray(crop) for crop in crops]


def _gradient() -> np.ndarray:
    y, x = np.mgrid[0:90, 0:120]
    return np.stack([x * 2, y * 2, x + y], -1).astype(np.uint8)


# str(imagehash.phash(...)) with imagehash 4.3.2, computed once by hand.
GOLDEN = {"gradient": "8225f4511b57ec3e", "china_crop": "99991cec1c33ccce",
          "flower_crop": "f5c7d5405503479b", "china": "9db8c2c7445dbb24"}


def test_perceptual_hash_matches_pinned_golden_values():
    from sklearn.datasets import load_sample_images

    china, flower = load_sample_images().images
    inputs = {"gradient": _gradient(), "china_crop": china[100:324, 200:424],
              "flower_crop": flower[100:324, 200:424], "china": china}
    found = {name: f"{image_hashes.perceptual_hash(np.ascontiguousarray(p))[0]:016x}"
             for name, p in inputs.items()}
    assert found == GOLDEN


def test_perceptual_hash_equals_imagehash_on_photo_content():
    for photo in _photos():
        phash, blank = image_hashes.perceptual_hash(photo)
        assert f"{phash:016x}" == str(imagehash.phash(Image.fromarray(photo)))
        assert not blank


@pytest.mark.parametrize("orientation", range(1, 9))
def test_orientation_turns_pixels_as_pillow_exif_transpose(orientation):
    pixels = random_pixels(orientation, 5, 7)
    upright = image_hashes.upright(pixels, orientation)
    np.testing.assert_array_equal(upright, pillow_exif_transpose(pixels, orientation))
    photo = _photos()[2]
    phash, _ = image_hashes.perceptual_hash(photo, orientation)
    reference = imagehash.phash(Image.fromarray(pillow_exif_transpose(photo, orientation)))
    assert f"{phash:016x}" == str(reference)


def test_pixel_hash_is_sha256_of_shape_and_row_major_pixels():
    pixels = random_pixels(3, 4, 6)
    expected = hashlib.sha256(b"4 6 3\n" + pixels.tobytes()).hexdigest()
    assert image_hashes.pixels_sha256(pixels) == expected
    # A non-contiguous view hashes its values, not its memory.
    flipped = pixels[:, ::-1]
    assert image_hashes.pixels_sha256(flipped) == hashlib.sha256(
        b"4 6 3\n" + np.ascontiguousarray(flipped).tobytes()).hexdigest()
    # The same bytes in another shape are another image.
    assert image_hashes.pixels_sha256(pixels.reshape(6, 4, 3)) != expected


def test_image_hashes_take_each_signature_from_its_own_input():
    data = b"file bytes"
    decoded = random_pixels(5, 8, 10)
    stored = _photos()[1]
    found = image_hashes.image_hashes(data, decoded, 6, stored)
    assert found.bytes_sha256 == hashlib.sha256(data).hexdigest()
    assert found.pixels_sha256 == image_hashes.pixels_sha256(
        np.ascontiguousarray(pillow_exif_transpose(decoded, 6)))
    assert f"{found.phash:016x}" == str(imagehash.phash(Image.fromarray(stored)))
    assert image_hashes.ImageHashes.from_dict(found.to_dict()) == found


def test_flat_images_are_blank_and_textured_ones_are_not():
    flat = np.full((40, 50, 3), 200, np.uint8)
    assert image_hashes.perceptual_hash(flat)[1]
    assert image_hashes.perceptual_hash(random_pixels(1, 40, 50))[1] is False


def test_a_flip_is_far_and_a_resize_is_near():
    photo = _photos()[1]
    phash, _ = image_hashes.perceptual_hash(photo)
    flipped, _ = image_hashes.perceptual_hash(np.ascontiguousarray(photo[:, ::-1]))
    smaller = np.asarray(Image.fromarray(photo).resize((150, 150), Image.Resampling.BICUBIC))
    resized, _ = image_hashes.perceptual_hash(smaller)
    assert image_hashes.hamming(phash, flipped) > 16
    assert image_hashes.hamming(phash, resized) <= 4
