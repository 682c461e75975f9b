"""Vectorised parse of serialized examples and parallel decode of stored images."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import tensorflow as tf

from etl import contract, image_codec


def parse_batch_fn(feature_spec: Mapping[str, Any]) -> Callable[[tf.Tensor], dict]:
    """``[batch] string`` → dict of ``[batch, ...]`` tensors, one parse op per batch."""
    spec = dict(feature_spec)

    def parse(serialized: tf.Tensor) -> dict[str, tf.Tensor]:
        return tf.io.parse_example(serialized, spec)

    return parse


def decode_images_fn(preprocessing: Mapping[str, Any]) -> Callable[[dict], dict]:
    """Replaces the encoded ``image`` of a parsed batch by ``uint8 [batch, s, s, 3]``.

    ``raw`` images decode with one vectorised ``decode_raw``; JPEG/PNG decode image
    by image inside the op (``map_fn``), while tf.data runs several batches at once.
    """
    image_format = preprocessing["image_format"]
    size = int(preprocessing["image_size"])

    def decode(features: dict[str, tf.Tensor]) -> dict[str, tf.Tensor]:
        encoded = features[contract.IMAGE_KEY]
        if image_format == image_codec.RAW:
            images = tf.reshape(tf.io.decode_raw(encoded, tf.uint8), [-1, size, size, 3])
        else:
            images = tf.map_fn(
                lambda x: image_codec.decode_stored(x, image_format, size), encoded,
                fn_output_signature=tf.TensorSpec([size, size, 3], tf.uint8),
                parallel_iterations=16)
        return {**features, contract.IMAGE_KEY: images}

    return decode


def to_float_images(features: dict[str, tf.Tensor]) -> dict[str, tf.Tensor]:
    """``uint8`` images → ``float32`` in ``[0, 1]`` (after cache, to cache 4× less)."""
    images = tf.cast(features[contract.IMAGE_KEY], tf.float32) / 255.0
    return {**features, contract.IMAGE_KEY: images}
