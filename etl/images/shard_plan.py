"""How many shards each image split gets, decided on keys before any image is transformed.

The shard step groups small records by ``(split, shard)``, so the shard counts must
be known before a single image is preprocessed. With ``--num_shards`` they are
given. Otherwise a split's serialized size is estimated and divided by
``--target_shard_mb``:

* ``raw`` images: exact, every stored image is ``image_size² × 3`` bytes;
* ``jpeg`` / ``png``: the mean stored size of a deterministic sample of up to
  ``SAMPLE_SIZE`` images per split (the keys with the lowest sample hash), read and
  preprocessed with the job's own ops, the EXIF turn left out (it barely moves the
  size, see :func:`stored_image_bytes`). A split's files can then differ from the
  target by the sample's error, typically a few percent. A split that fits one shard
  even if every image were stored at twice its raw size plus 4 KiB is not
  sampled at all: it gets one shard (the sample's decodes are wasted work there).

The estimate is a pure function of the input, so the plan (and the files) are the
same on every rerun, worker count and runner.
"""

from __future__ import annotations

import concurrent.futures
import functools
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import apache_beam as beam

from etl.core import cores, hashing
from etl.core.io import storage
from etl.core.shards.plan import PlanShards
from etl.core.transform.examples import serialize_example
from etl.images import codec, labels, loading
from etl.images.preprocessing import ImagePreprocessing
from etl.images.sources import ImageRecord
from reader.format import contract

SAMPLE_SIZE = 32
SAMPLE_SALT = "sample"
# No stored JPEG or PNG reaches twice the raw size plus its headers: uniform noise,
# the worst case, stays below raw size as JPEG and barely above it as PNG, and
# JPEG's tables fit the header allowance of tiny images
# (tests/etl/images/test_shard_plan.py).
UPPER_BOUND_FACTOR = 2.0
UPPER_BOUND_HEADER_BYTES = 4096


def stored_image_bytes(data: bytes, preprocessing: ImagePreprocessing,
                       limits: loading.InputLimits) -> int | None:
    """Size of ``data`` once preprocessed and encoded, or None if it is refused or
    cannot be decoded (the shard step will reject it; it is left out of the mean).

    Decoded once, as the shard step does: a JPEG by its check
    (``loading.check_image``), anything else by the transform's ops."""
    import tensorflow as tf

    checked = loading.check_image(data, limits, preprocessing.image_size)
    if not isinstance(checked, loading.Checked):
        return None
    pixels = None
    if checked.jpeg is not None:
        pixels = loading.decode_jpeg_into(
            data, checked.jpeg, loading.aligned_buffer(checked.jpeg.nbytes),
            limits.strict_decoding)
        if isinstance(pixels, tuple):
            return None
    # The job's own rule but for the EXIF orientation: it only turns or mirrors
    # the stored square, which barely moves the encoded size
    # (tests/etl/images/test_shard_plan.py), while its parse, run here as eager ops,
    # costs as much as the rest of the sample's preprocessing.
    try:
        if pixels is not None:
            plan = checked.jpeg
            encoded = codec.finish(
                tf.constant(pixels), tf.constant(b""), preprocessing.image_size,
                preprocessing.image_format, preprocessing.jpeg_quality,
                apply_exif_orientation=False,
                source_shape=tf.constant([plan.source_height, plan.source_width]),
                ratio=plan.ratio)
        else:
            encoded = codec.preprocess(
                tf.constant(data), preprocessing.image_size, preprocessing.image_format,
                preprocessing.jpeg_quality, apply_exif_orientation=False,
                alpha_background=preprocessing.alpha_background)
    except tf.errors.OpError:
        return None
    return len(encoded.numpy())


def _stored_size_of(record: ImageRecord, preprocessing: ImagePreprocessing,
                    limits: loading.InputLimits) -> int | None:
    try:
        data = storage.read_bytes(record.uri, limits.max_file_bytes)
    except OSError:
        return None
    return stored_image_bytes(data, preprocessing, limits)


def mean_stored_image_bytes(records: Iterable[ImageRecord], preprocessing: ImagePreprocessing,
                            limits: loading.InputLimits) -> float:
    """Mean stored image size over ``records`` (a sample); exact for ``raw``.

    The sample is decoded on one thread per core (TensorFlow's ops release the GIL):
    it runs in a stage of its own, with nothing else to keep the cores busy. Falls
    back to the ``raw`` size, an upper bound for JPEG and PNG, when no sampled image
    can be read and preprocessed.
    """
    raw_size = preprocessing.image_size ** 2 * 3
    if preprocessing.image_format == codec.RAW:
        return float(raw_size)
    with concurrent.futures.ThreadPoolExecutor(max(2, cores.usable())) as pool:
        sizes = [size for size in pool.map(
            lambda record: _stored_size_of(record, preprocessing, limits), records)
            if size is not None]
    return sum(sizes) / len(sizes) if sizes else float(raw_size)


def estimated_split_bytes(num_records: int, key_bytes: int, label_bytes: int,
                          image_bytes: float, image_size: int) -> int:
    """Serialized size of a split's examples: one example of the mean sizes, times
    the record count."""
    def mean(total: int) -> int:
        return round(total / num_records) if num_records else 0

    example = serialize_example({
        contract.IMAGE_KEY: b"\0" * round(image_bytes),
        contract.HEIGHT_KEY: image_size, contract.WIDTH_KEY: image_size,
        contract.CHANNELS_KEY: 3, contract.LABEL_KEY: 0,
        contract.LABEL_NAME_KEY: b"\0" * mean(label_bytes),
        contract.SOURCE_KEY: b"\0" * mean(key_bytes),
    })
    return num_records * len(example)


def upper_bound_image_bytes(image_size: int) -> float:
    """More than any stored JPEG or PNG of an ``image_size`` square RGB image."""
    return UPPER_BOUND_FACTOR * image_size ** 2 * 3 + UPPER_BOUND_HEADER_BYTES


def fits_one_shard(num_records: int, key_bytes: int, label_bytes: int,
                   preprocessing: ImagePreprocessing, target_shard_bytes: int) -> bool:
    """True if the split fits one shard even at the upper bound of stored sizes."""
    bound = upper_bound_image_bytes(preprocessing.image_size)
    return estimated_split_bytes(num_records, key_bytes, label_bytes, bound,
                                 preprocessing.image_size) <= target_shard_bytes


def _sizes(record: ImageRecord) -> tuple[int, int, int]:
    # Everything stored besides the image and the key counts as "label" bytes: class
    # names, targets (4 bytes each) and carried text.
    text = (*labels.label_names(record.label), *record.carried)
    label_bytes = sum(len(t.encode("utf-8")) for t in text) + 4 * len(record.targets)
    return 1, len(record.key.encode("utf-8")), label_bytes


def _by_split(record: ImageRecord) -> tuple[str, ImageRecord]:
    return record.split, record


def _sample_key(record: ImageRecord) -> tuple[int, str]:
    return hashing.stable_hash64(record.key, SAMPLE_SALT), record.key


def _measure_sample(element: tuple[str, list[ImageRecord]],
                    preprocessing: ImagePreprocessing,
                    limits: loading.InputLimits,
                    sizes: dict[str, tuple[int, int, int]], target_shard_bytes: int
                    ) -> Iterator[tuple[str, float]]:
    split, sample = element
    if not fits_one_shard(*sizes[split], preprocessing, target_shard_bytes):
        yield split, mean_stored_image_bytes(sample, preprocessing, limits)


def _sampled_image_bytes(records: beam.PCollection, sizes: Any, *,
                         preprocessing: ImagePreprocessing, limits: loading.InputLimits,
                         target_shard_bytes: int) -> beam.PCollection:
    """``(split, mean stored image bytes of its sample)`` for every split that may
    not fit one shard."""
    return (
        records
        # (split, ImageRecord)
        | "KeyBySplit" >> beam.Map(_by_split)
        # (split, [ImageRecord]): the sample
        | "SampleImages" >> beam.combiners.Top.PerKey(SAMPLE_SIZE, key=_sample_key,
                                                      reverse=True)
        # (split, mean stored image bytes)
        | "MeasureSample" >> beam.FlatMap(
            _measure_sample, preprocessing=preprocessing, limits=limits, sizes=sizes,
            target_shard_bytes=target_shard_bytes)
    )


def _split_bytes(split: str, sizes: tuple[int, ...], image_bytes: Mapping[str, float],
                 image_size: int) -> int:
    if split not in image_bytes:  # Not sampled: it fits one shard at the upper bound.
        return 0
    num_records, key_bytes, label_bytes = sizes
    return estimated_split_bytes(num_records, key_bytes, label_bytes, image_bytes[split],
                                 image_size)


class PlanImageShards(PlanShards):
    """Split-assigned ``ImageRecord``s → ``(split, num_shards)`` for every non-empty
    split: a record's measures are ``(1, key bytes, label bytes)``, and its stored
    image size is estimated from the split's sample."""

    def __init__(self, preprocessing: ImagePreprocessing, limits: loading.InputLimits,
                 *, target_shard_bytes: int, num_shards: int | None) -> None:
        super().__init__(
            measure=_sizes, target_shard_bytes=target_shard_bytes, num_shards=num_shards,
            split_bytes=functools.partial(_split_bytes,
                                          image_size=preprocessing.image_size),
            estimate=functools.partial(_sampled_image_bytes, preprocessing=preprocessing,
                                       limits=limits,
                                       target_shard_bytes=target_shard_bytes))
