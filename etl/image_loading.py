"""Reads each image's bytes and rejects what tf.Transform could not decode.

Runs before the tf.Transform stage because one undecodable image inside a
tf.Transform batch would fail the whole batch (and with it the job).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import apache_beam as beam
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from etl import dead_letters, image_codec, splits
from etl.dead_letters import Rejection
from etl.image_sources import ImageRecord

REJECTED = "rejected"

# Raw feature keys: the input of preprocessing_fn (see etl/image_preprocessing.py).
RAW_IMAGE_KEY = "image"
RAW_LABEL_KEY = "label"
RAW_SOURCE_KEY = "key"


def read_bytes(uri: str) -> bytes:
    """All bytes of ``uri`` through Beam's filesystems (local, gs://, s3://, ...).

    Raises:
        OSError: if the file cannot be opened or read.
    """
    # UNCOMPRESSED: never let a ".gz"-looking name be silently decompressed.
    with FileSystems.open(uri, compression_type=CompressionTypes.UNCOMPRESSED) as f:
        return f.read()


def tf_error_detail(message: str) -> str:
    """The human part of a TensorFlow error message, without run-specific node and
    function names (they embed counters, which would make dead letters differ
    between otherwise identical runs)."""
    message = re.sub(r"\{\{[^}]*\}\}|\[\[[^\]]*\]\]|\[Op:[^\]]*\].*", " ", message)
    return " ".join(message.split())[:300]


def validate_image_bytes(data: bytes) -> tuple[str, str] | None:
    """``(reason, message)`` if ``data`` cannot be preprocessed, else None."""
    if not data:
        return dead_letters.EMPTY_FILE, "File is empty (0 bytes)."
    image_format = image_codec.sniff_format(data)
    if image_format is None:
        return (dead_letters.UNSUPPORTED_FORMAT,
                f"Not a JPEG, PNG, GIF, BMP or WebP file (starts with {data[:8]!r}).")
    import tensorflow as tf

    try:
        height, width = image_codec.check_decodable(data)
    except tf.errors.InvalidArgumentError as e:
        detail = tf_error_detail(e.message)
        return (dead_letters.UNDECODABLE_IMAGE,
                f"TensorFlow cannot decode this {image_format.upper()} file: {detail}")
    if height == 0 or width == 0:
        return dead_letters.UNDECODABLE_IMAGE, f"Image has size {height}x{width}."
    return None


class LoadImages(beam.DoFn):
    """``ImageRecord`` → ``(split, raw instance dict)``, or a tagged ``Rejection``.

    The raw instance dict is ``{"image": bytes, "label": str, "key": str}``; the
    split is the record's explicit split or a stable hash of its key.
    """

    def __init__(self, fractions: splits.SplitFractions) -> None:
        self._fractions = fractions

    def setup(self) -> None:
        self._loaded = beam.metrics.Metrics.counter(dead_letters.METRICS_NAMESPACE,
                                                    "images_loaded")

    def process(self, record: ImageRecord) -> Iterator[Any]:
        try:
            data = read_bytes(record.uri)
        except OSError as e:
            yield self._reject(record, dead_letters.UNREADABLE_FILE,
                               f"Cannot read file: {e}")
            return
        problem = validate_image_bytes(data)
        if problem is not None:
            yield self._reject(record, *problem)
            return
        split = record.split or splits.assign_split(record.key, self._fractions)
        self._loaded.inc()
        yield split, {RAW_IMAGE_KEY: data, RAW_LABEL_KEY: record.label,
                      RAW_SOURCE_KEY: record.key}

    @staticmethod
    def _reject(record: ImageRecord, reason: str, message: str) -> Any:
        dead_letters.count_rejection(reason)
        return beam.pvalue.TaggedOutput(
            REJECTED, Rejection(key=record.key, source=record.uri, reason=reason,
                                message=message))
