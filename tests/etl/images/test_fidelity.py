"""Stored pixels against an independent reference: Pillow decodes the whole photo at
full size, turns it upright (``exif_transpose``), resizes its shorter side to 224 with
its antialiased bilinear filter and crops the centre. The job decodes JPEGs at a
reduced DCT scale (etl/images/codec.py): this is what that costs in fidelity, after
the quality-95 encode that dominates the loss."""

from __future__ import annotations

import io

import numpy as np
import pytest
import tensorflow as tf
from PIL import Image, ImageOps

from etl.images import codec, loading
from etl.images.batches import DecodedPixels, FinishImages
from etl.images.preprocessing import ImagePreprocessing
from reader.format import contract
from reader.tfdata.decoding import decode_stored_image
from tests import jpeg_corpus
from tests.image_loading import decode_jpeg_checked

SIZE = 224
CONFIG = ImagePreprocessing(image_size=SIZE, jpeg_quality=95)
# (height, width) of phone photos (12 MP), one portrait.
CAMERA_SIZES = ((3024, 4032), (3024, 4032), (4032, 3024), (3024, 4032))
# Web-size photos: 320-1,280 px on the longer side, both orientations; those with a
# shorter side of 896 px or more are decoded at 1/2, at sizes that are not multiples
# of 2 (whose resize must still land on the full-size grid).
WEB_SIZES = ((240, 320), (427, 640), (600, 800), (768, 1024), (960, 1280), (1280, 960),
             (900, 900), (500, 1200), (993, 1248), (1169, 944), (1024, 1053))


def _photo(seed: int, height: int, width: int, orientation: int) -> bytes:
    """Sample-photo content at this size with sensor-like noise, as a camera saves it
    (quality 92, EXIF orientation tag)."""
    return jpeg_corpus.encode(jpeg_corpus.photo_window(seed, height, width), "420",
                              orientation, quality=92)


def reference(data: bytes) -> np.ndarray:
    """Full decode, upright, shorter side to SIZE (antialiased bilinear), centre crop."""
    with Image.open(io.BytesIO(data)) as image:
        image = ImageOps.exif_transpose(image).convert("RGB")
    width, height = image.size
    shorter = min(width, height)
    scaled = ((width * SIZE + shorter // 2) // shorter, (height * SIZE + shorter // 2) // shorter)
    resized = image.resize((max(SIZE, scaled[0]), max(SIZE, scaled[1])),
                           Image.Resampling.BILINEAR)
    left, top = (resized.width - SIZE) // 2, (resized.height - SIZE) // 2
    return np.asarray(resized.crop((left, top, left + SIZE, top + SIZE)), np.float64)


def stored(data: bytes, config: ImagePreprocessing = CONFIG) -> np.ndarray:
    """The job's stored image for ``data`` (its one decode, then the transform's ops),
    decoded as the reader decodes it."""
    plan = loading.plan_jpeg_decode(data, SIZE)
    pixels = decode_jpeg_checked(data, SIZE, strict=True)
    assert plan is not None and isinstance(pixels, np.ndarray)
    encoded = FinishImages(config)([DecodedPixels.of(pixels, plan)], [data])[0].stored
    return decode_stored_image(tf.constant(encoded), config.image_format,
                                        SIZE).numpy()


def stored_from_full_decode(data: bytes) -> np.ndarray:
    """The same preprocessing from TensorFlow's default full-size decode (the fast
    IDCT): how the job stored photos before decoding at the DCT scale."""
    image = tf.io.decode_image(data, channels=3, expand_animations=False)
    encoded = codec.finish(image, tf.constant(data), SIZE, contract.JPEG, 95)
    return decode_stored_image(encoded, contract.JPEG, SIZE).numpy()


def psnr(image: np.ndarray, ref: np.ndarray) -> float:
    mse = float(np.mean((image.astype(np.float64) - ref) ** 2))
    return 10 * np.log10(255.0 ** 2 / mse)


@pytest.fixture(scope="module")
def camera_photos() -> list[bytes]:
    return [_photo(seed, h, w, orientation=6 if seed % 2 else 1)
            for seed, (h, w) in enumerate(CAMERA_SIZES)]


@pytest.fixture(scope="module")
def web_photos() -> list[bytes]:
    return [_photo(100 + seed, h, w, orientation=(1, 6, 3, 8)[seed % 4])
            for seed, (h, w) in enumerate(WEB_SIZES)]


def test_camera_photos_are_decoded_at_a_reduced_scale(camera_photos):
    # Not vacuous: the figures below are those of a 1/4-scale decode.
    for data in camera_photos:
        height, width = Image.open(io.BytesIO(data)).size[::-1]
        assert codec.jpeg_decode_ratio(height, width, SIZE) == 4


def test_reduced_scale_decode_and_resize_stay_close_to_the_reference(camera_photos):
    # Stored raw (no JPEG encode): what the 1/4-scale decode itself costs.
    raw = ImagePreprocessing(image_size=SIZE, image_format=contract.RAW)
    values = [psnr(stored(data, raw), reference(data)) for data in camera_photos]
    assert min(values) >= 50.0, values


def test_stored_camera_photos_match_a_full_decode_reference(camera_photos):
    # The quality-95 encode is most of the loss: the full-size decode's path, stored
    # the same way, is no closer to the reference.
    new = [psnr(stored(data), reference(data)) for data in camera_photos]
    old = [psnr(stored_from_full_decode(data), reference(data)) for data in camera_photos]
    assert min(new) >= 35.0, new
    assert np.mean(new) >= np.mean(old), (new, old)


def test_stored_web_photos_are_no_worse_than_from_a_full_decode(web_photos):
    new = [psnr(stored(data), reference(data)) for data in web_photos]
    old = [psnr(stored_from_full_decode(data), reference(data)) for data in web_photos]
    assert np.mean(new) >= np.mean(old), (new, old)
    assert min(new) >= min(old) - 0.1, (new, old)

