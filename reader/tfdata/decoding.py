"""Vectorised parse of serialized examples and what each kind of example needs after."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

import tensorflow as tf

from reader.format import contract
from reader.format.contract import IMAGES
from reader.tfdata import labels
from reader.tfdata.dataset_info import DatasetInfo


@dataclasses.dataclass(frozen=True)
class KindSpec:
    """How a kind of example becomes ``(model input, label)``.

    Attributes:
        input_key: the model-input feature (``image`` or ``window``).
        label: model-ready batch → the label (``reader.tfdata.labels.label_fn``).
        decode: parsed batch → decoded batch (what ``cache``/``snapshot`` store).
        finish: decoded batch → model-ready batch (e.g. uint8 images → float).
        decoded_record_bytes: memory per decoded record (sizes the shuffle buffer).
        augmentable: whether ``augment`` applies (images only).
    """

    input_key: str
    label: labels.LabelFn
    decode: Callable[[dict], dict]
    finish: Callable[[dict], dict]
    decoded_record_bytes: int
    augmentable: bool


def _identity(features: dict[str, tf.Tensor]) -> dict[str, tf.Tensor]:
    return features


def kind_spec(info: DatasetInfo) -> KindSpec:
    """The ``KindSpec`` for the dataset in ``info``."""
    label = labels.label_fn(info)
    if info.kind == IMAGES:
        size = int(info.preprocessing["image_size"])
        return KindSpec(contract.IMAGE_KEY, label, decode_images_fn(info.preprocessing),
                        to_float_images, size * size * 3, augmentable=True)
    window_shape = info.manifest["features"][contract.WINDOW_KEY]["shape"]
    window_bytes = 4 * int(window_shape[0]) * int(window_shape[1])
    return KindSpec(contract.WINDOW_KEY, label, _identity, _identity, window_bytes,
                    augmentable=False)


def parse_batch_fn(feature_spec: Mapping[str, Any]) -> Callable[[tf.Tensor], dict]:
    """``[batch] string`` → dict of ``[batch, ...]`` tensors, one parse op per batch
    (var_len features as ``tf.SparseTensor``, see :func:`var_len_as_ragged`)."""
    spec = dict(feature_spec)

    def parse(serialized: tf.Tensor) -> dict[str, tf.Tensor]:
        parsed = tf.io.parse_example(serialized, spec)
        for value in parsed.values():
            if isinstance(value, tf.SparseTensor):
                # parse_example leaves the batch dimension unknown even when it is
                # static (drop_remainder).
                value.set_shape(serialized.shape[:1].concatenate([None]))
        return parsed

    return parse


def var_len_as_ragged(features: dict[str, Any]) -> dict[str, Any]:
    """Turns the var_len features of a batch, ``tf.SparseTensor [batch, None]``, into
    ``tf.RaggedTensor [batch, None]`` (values in stored order).

    They stay sparse until the batch is formed: a sparse element passes ``unbatch``,
    ``cache``, ``snapshot`` and ``batch`` intact, where ``snapshot`` turns a ragged
    one into a plain tensor that ``batch`` cannot stack (TensorFlow 2.21).
    """
    return {name: _ragged(value) if isinstance(value, tf.SparseTensor) else value
            for name, value in features.items()}


def _ragged(sparse: tf.SparseTensor) -> tf.RaggedTensor:
    # Static with drop_remainder, so that the ragged batch dimension is too.
    rows = sparse.shape[0] if sparse.shape[0] is not None else sparse.dense_shape[0]
    # Indices of a parsed (or batched) sparse tensor are in row-major order.
    return tf.RaggedTensor.from_value_rowids(sparse.values, sparse.indices[:, 0],
                                             nrows=rows, validate=False)


def decode_stored_image(encoded: Any, image_format: str, size: int) -> Any:
    """One stored image (scalar string tensor) → ``uint8 [size, size, 3]``.

    The inverse of the job's encoding (``etl/images/codec.py``'s ``encode``). JPEG
    decodes with the IDCT :data:`reader.format.contract.STORED_JPEG_DCT_METHOD`.

    Raises:
        ValueError: for an ``image_format`` not in ``contract.IMAGE_FORMATS``.
    """
    if image_format == contract.RAW:
        image = tf.reshape(tf.io.decode_raw(encoded, tf.uint8), [size, size, 3])
    elif image_format == contract.JPEG:
        image = tf.io.decode_jpeg(encoded, channels=3,
                                  dct_method=contract.STORED_JPEG_DCT_METHOD)
    elif image_format == contract.PNG:
        image = tf.io.decode_png(encoded, channels=3)
    else:
        raise ValueError(f"Unknown image format {image_format!r}; use one of "
                         f"{contract.IMAGE_FORMATS}.")
    image.set_shape([size, size, 3])
    return image


def decode_images_fn(preprocessing: Mapping[str, Any]) -> Callable[[dict], dict]:
    """Replaces the encoded ``image`` of a parsed batch by ``uint8 [batch, s, s, 3]``.

    ``raw`` images decode with one vectorised ``decode_raw``; JPEG/PNG decode image
    by image inside the op (``map_fn``), while tf.data runs several batches at once.
    """
    image_format = preprocessing["image_format"]
    size = int(preprocessing["image_size"])

    def decode(features: dict[str, tf.Tensor]) -> dict[str, tf.Tensor]:
        encoded = features[contract.IMAGE_KEY]
        if image_format == contract.RAW:
            images = tf.reshape(tf.io.decode_raw(encoded, tf.uint8), [-1, size, size, 3])
        else:
            images = tf.map_fn(
                lambda x: decode_stored_image(x, image_format, size), encoded,
                fn_output_signature=tf.TensorSpec([size, size, 3], tf.uint8),
                parallel_iterations=16)
        return {**features, contract.IMAGE_KEY: images}

    return decode


def to_float_images(features: dict[str, tf.Tensor]) -> dict[str, tf.Tensor]:
    """``uint8`` images → ``float32`` in ``[0, 1]`` (after cache, to cache 4× less)."""
    images = tf.cast(features[contract.IMAGE_KEY], tf.float32) / 255.0
    return {**features, contract.IMAGE_KEY: images}
