"""Stored JPEGs decode with the documented IDCT (contract.STORED_JPEG_DCT_METHOD)."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from reader.format import contract
from reader.tfdata import decoding

SIZE = 224
QUALITY = 95  # What the image job stores by default.


def photo_like(seed: int) -> np.ndarray:
    """``uint8 [SIZE, SIZE, 3]``: smooth shading, a few hard edges and fine noise,
    the mix of low and high frequencies a downscaled photo has."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:SIZE, 0:SIZE].astype(np.float64) / SIZE
    channels = []
    for _ in range(3):
        fx, fy, phase = rng.uniform(1, 6), rng.uniform(1, 6), rng.uniform(0, 2 * np.pi)
        shading = 128 + 70 * np.sin(2 * np.pi * (fx * x + fy * y) + phase)
        edges = 40 * ((x + rng.uniform(-0.3, 0.3) * y) > rng.uniform(0.3, 0.7))
        channels.append(shading + edges + rng.normal(0, 12, (SIZE, SIZE)))
    return np.clip(np.round(np.stack(channels, -1)), 0, 255).astype(np.uint8)


@pytest.fixture(scope="module")
def stored_jpeg() -> tuple[np.ndarray, tf.Tensor]:
    """(pixels, their stored JPEG bytes) encoded as the image job encodes them."""
    pixels = photo_like(0)
    return pixels, tf.io.encode_jpeg(pixels, format="rgb", quality=QUALITY)


def decode_jpeg(encoded: tf.Tensor, dct_method: str) -> np.ndarray:
    return tf.io.decode_jpeg(encoded, channels=3, dct_method=dct_method).numpy()


def psnr(decoded: np.ndarray, original: np.ndarray) -> float:
    mse = np.mean((decoded.astype(np.float64) - original.astype(np.float64)) ** 2)
    return float(10 * np.log10(255.0 ** 2 / mse))


def test_decode_stored_image_jpeg_equals_the_accurate_idct(stored_jpeg):
    _, encoded = stored_jpeg
    decoded = decoding.decode_stored_image(encoded, contract.JPEG, SIZE).numpy()
    np.testing.assert_array_equal(decoded, decode_jpeg(encoded, "INTEGER_ACCURATE"))


def test_decode_stored_image_jpeg_differs_from_the_fast_idct(stored_jpeg):
    # The fast IDCT is libjpeg's default (what tf.io.decode_image uses): on a q95
    # photo-like image the choice changes the pixels, so readers must share it.
    _, encoded = stored_jpeg
    decoded = decoding.decode_stored_image(encoded, contract.JPEG, SIZE).numpy()
    assert (decoded != decode_jpeg(encoded, "INTEGER_FAST")).any()


def test_decode_stored_image_jpeg_is_closer_to_the_encoded_pixels_than_fast(stored_jpeg):
    pixels, encoded = stored_jpeg
    decoded = decoding.decode_stored_image(encoded, contract.JPEG, SIZE).numpy()
    assert psnr(decoded, pixels) > psnr(decode_jpeg(encoded, "INTEGER_FAST"), pixels)


@pytest.mark.parametrize("image_format", [contract.JPEG, contract.PNG])
def test_decode_stored_image_in_a_graph_has_the_static_shape(image_format):
    encode = {contract.JPEG: lambda p: tf.io.encode_jpeg(p, quality=QUALITY),
              contract.PNG: tf.io.encode_png}[image_format]
    decode = tf.function(lambda x: decoding.decode_stored_image(x, image_format, SIZE),
                         input_signature=[tf.TensorSpec([], tf.string)])
    graph = decode.get_concrete_function()
    assert graph.structured_outputs.shape.as_list() == [SIZE, SIZE, 3]
    assert decode(encode(photo_like(1))).shape == (SIZE, SIZE, 3)


def test_decode_stored_image_png_is_exact():
    pixels = photo_like(2)
    decoded = decoding.decode_stored_image(tf.io.encode_png(pixels), contract.PNG, SIZE)
    np.testing.assert_array_equal(decoded.numpy(), pixels)


def test_decode_images_fn_jpeg_batch_uses_the_accurate_idct():
    encoded = [tf.io.encode_jpeg(photo_like(seed), quality=QUALITY) for seed in (3, 4)]
    decode = decoding.decode_images_fn({"image_format": contract.JPEG, "image_size": SIZE})
    images = tf.function(decode)({contract.IMAGE_KEY: tf.stack(encoded)})[contract.IMAGE_KEY]
    expected = np.stack([decode_jpeg(e, "INTEGER_ACCURATE") for e in encoded])
    np.testing.assert_array_equal(images.numpy(), expected)
