"""Seeded, batched image augmentation: flip, brightness, contrast, padded random crop.

Runs after the cache on ``float32 [batch, h, w, 3]`` images in ``[0, 1]``. Every op is
a stateless random op driven by a per-batch seed, so a run with a fixed seed repeats
exactly while each epoch still draws new augmentations.
"""

from __future__ import annotations

import dataclasses

import tensorflow as tf


@dataclasses.dataclass(frozen=True)
class Augmentation:
    """Which augmentations to apply and how strongly (the seeds' choices by default).

    Attributes:
        flip: random left-right flip with probability 1/2.
        max_brightness_delta: add a uniform delta in ``[-d, d]`` per image (0: off).
        contrast_range: scale deviations from the per-image mean by a uniform factor
            in ``[lower, upper]`` (``(1, 1)``: off).
        crop_padding: reflect-pad each side by this many pixels (at most the image
            side minus one), then crop back to the original size at a random offset
            (0: off). The seeds pad 224 → 256.
    """

    flip: bool = True
    max_brightness_delta: float = 0.2
    contrast_range: tuple[float, float] = (0.8, 1.2)
    crop_padding: int = 16

    def __post_init__(self) -> None:
        lower, upper = self.contrast_range
        if not 0 <= lower <= upper:
            raise ValueError(f"contrast_range must satisfy 0 <= lower <= upper, got "
                             f"{self.contrast_range}.")
        if self.max_brightness_delta < 0 or self.crop_padding < 0:
            raise ValueError("max_brightness_delta and crop_padding must be >= 0.")


def _random_crop(images: tf.Tensor, padding: int, seed: tf.Tensor) -> tf.Tensor:
    shape = tf.shape(images)
    batch, height, width = shape[0], shape[1], shape[2]
    # Reflect padding must be smaller than the image (matters for tiny images).
    padding = tf.minimum(padding, tf.minimum(height, width) - 1)
    padded = tf.pad(images, [[0, 0], [padding, padding], [padding, padding], [0, 0]],
                    mode="REFLECT")
    offsets = tf.random.stateless_uniform([batch, 2], seed, minval=0,
                                          maxval=2 * padding + 1, dtype=tf.int32)
    # Normalised boxes that sample exactly the integer pixel grid of each crop.
    padded_h = tf.cast(height + 2 * padding - 1, tf.float32)
    padded_w = tf.cast(width + 2 * padding - 1, tf.float32)
    top = tf.cast(offsets[:, 0], tf.float32)
    left = tf.cast(offsets[:, 1], tf.float32)
    boxes = tf.stack([top / padded_h, left / padded_w,
                      (top + tf.cast(height - 1, tf.float32)) / padded_h,
                      (left + tf.cast(width - 1, tf.float32)) / padded_w], axis=1)
    return tf.image.crop_and_resize(padded, boxes, tf.range(batch), [height, width])


def augment_images(images: tf.Tensor, seed: tf.Tensor, config: Augmentation) -> tf.Tensor:
    """Applies ``config`` to a batch, each image drawing its own random parameters.

    Args:
        images: ``float32 [batch, h, w, 3]`` in ``[0, 1]``.
        seed: ``int64 [2]`` stateless seed for this batch.
        config: what to apply.

    Returns:
        Augmented images, same shape, clipped to ``[0, 1]``.
    """
    seeds = tf.random.experimental.stateless_split(seed, num=4)
    batch = tf.shape(images)[0]
    if config.flip:
        flip = tf.random.stateless_uniform([batch, 1, 1, 1], seeds[0]) < 0.5
        images = tf.where(flip, tf.reverse(images, axis=[2]), images)
    if config.max_brightness_delta > 0:
        d = config.max_brightness_delta
        images = images + tf.random.stateless_uniform([batch, 1, 1, 1], seeds[1], -d, d)
    lower, upper = config.contrast_range
    if (lower, upper) != (1.0, 1.0):
        factor = tf.random.stateless_uniform([batch, 1, 1, 1], seeds[2], lower, upper)
        mean = tf.reduce_mean(images, axis=[1, 2, 3], keepdims=True)
        images = (images - mean) * factor + mean
    if config.crop_padding > 0:
        images = _random_crop(images, config.crop_padding, seeds[3])
    return tf.clip_by_value(images, 0.0, 1.0)
