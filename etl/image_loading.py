"""Reads each image's bytes and rejects what tf.Transform could not decode.

Runs before the tf.Transform stage because one undecodable image inside a
tf.Transform batch would fail the whole batch (and with it the job).
"""

from __future__ import annotations

import collections
import concurrent.futures
import dataclasses
import io
import os
import re
import struct
import sys
import warnings
from collections.abc import Iterator
from typing import Any

import apache_beam as beam
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems
from apache_beam.transforms import window

from etl import dead_letters, image_codec, splits
from etl.dead_letters import Rejection
from etl.image_sources import ImageRecord

REJECTED = dead_letters.REJECTED

# Raw feature keys: the input of preprocessing_fn (see etl/image_preprocessing.py).
RAW_IMAGE_KEY = "image"
RAW_LABEL_KEY = "label"
RAW_SOURCE_KEY = "key"


DEFAULT_MAX_FILE_BYTES = 64 * 1024 * 1024
DEFAULT_MAX_IMAGE_PIXELS = 64 * 1024 * 1024
# Below glibc's mmap threshold (128 KiB), so reads come from the heap and a short
# read shrinks in place instead of keeping a mapping of its own.
READ_CHUNK_BYTES = 64 * 1024


@dataclasses.dataclass(frozen=True)
class InputLimits:
    """Limits that keep one hostile or broken input from exhausting a worker."""

    max_file_bytes: int = DEFAULT_MAX_FILE_BYTES
    max_image_pixels: int = DEFAULT_MAX_IMAGE_PIXELS

    def __post_init__(self) -> None:
        if self.max_file_bytes < 1 or self.max_image_pixels < 1:
            raise ValueError("--max_file_mb and --max_image_pixels must be positive.")


def read_bytes(uri: str, max_bytes: int | None = None,
               chunk_bytes: int = READ_CHUNK_BYTES) -> bytes:
    """The bytes of ``uri`` through Beam's filesystems (local, gs://, s3://, ...).

    Reads at most ``max_bytes + 1`` bytes, so an oversized file is detected without
    loading it whole. It reads in ``chunk_bytes`` pieces: ``f.read(n)`` allocates
    ``n`` bytes up front, and with ``n`` = ``--max_file_mb`` (64 MiB) every image
    cost a 64 MiB mmap and left each small image in a page-rounded mapping of its
    own (3.4x its size in resident memory; docs/RUNNING_AT_SCALE.md).

    Raises:
        OSError: if the file cannot be opened or read.
    """
    if chunk_bytes < 1:
        raise ValueError(f"chunk_bytes must be positive, got {chunk_bytes}.")
    # UNCOMPRESSED: never let a ".gz"-looking name be silently decompressed.
    with FileSystems.open(uri, compression_type=CompressionTypes.UNCOMPRESSED) as f:
        if max_bytes is None:
            return f.read()
        chunks: list[bytes] = []
        remaining = max_bytes + 1
        while remaining > 0:
            chunk = f.read(min(remaining, chunk_bytes))
            if not chunk:
                break
            chunks.append(chunk)
            remaining -= len(chunk)
        # One chunk (a file under chunk_bytes) is returned as is, without a copy.
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def declared_pixels(data: bytes) -> int | None:
    """Width × height from the image header, without decoding pixels (Pillow reads
    only the header on open); None if Pillow cannot read the header (TensorFlow's
    full decode then decides)."""
    from PIL import Image

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", Image.DecompressionBombWarning)
        try:
            with Image.open(io.BytesIO(data)) as image:
                width, height = image.size
        except Image.DecompressionBombError as e:
            # Pillow refuses > 2x its own limit at open: the size is in the message.
            sizes = [int(n) for n in re.findall(r"\d+", str(e))]
            return sizes[0] if sizes else sys.maxsize
        except (OSError, SyntaxError, ValueError, EOFError, struct.error):
            return None  # A header Pillow cannot parse: TensorFlow's decode decides.
    return width * height


def tf_error_detail(message: str) -> str:
    """The human part of a TensorFlow error message, without run-specific node and
    function names (they embed counters, which would make dead letters differ
    between otherwise identical runs)."""
    message = re.sub(r"\{\{[^}]*\}\}|\[\[[^\]]*\]\]|\[Op:[^\]]*\].*", " ", message)
    return " ".join(message.split())[:300]


def validate_image_bytes(data: bytes, limits: InputLimits = InputLimits()
                         ) -> tuple[str, str] | None:
    """``(reason, message)`` if ``data`` cannot be preprocessed, else None.

    Checks, cheapest first: size, container format, the header's pixel count
    (a decompression bomb is refused before any decoding), then a full decode.
    """
    if not data:
        return dead_letters.EMPTY_FILE, "File is empty (0 bytes)."
    if len(data) > limits.max_file_bytes:
        return (dead_letters.FILE_TOO_LARGE,
                f"File exceeds --max_file_mb ({limits.max_file_bytes} bytes).")
    image_format = image_codec.sniff_format(data)
    if image_format is None:
        # Says what is wrong without quoting the file: dead letters are shared, and
        # the file may be anything the job was pointed at.
        return (dead_letters.UNSUPPORTED_FORMAT,
                "No known image signature: not a JPEG, PNG, GIF, BMP or WebP file.")
    pixels = declared_pixels(data)
    if pixels is not None and pixels > limits.max_image_pixels:
        message = (f"Header declares {pixels} pixels, above --max_image_pixels "
                   f"({limits.max_image_pixels}); not decoded.")
        return dead_letters.IMAGE_TOO_LARGE, message
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


def load_image(record: ImageRecord, fractions: splits.SplitFractions,
               limits: InputLimits = InputLimits(),
               allowed_labels: frozenset[str] | None = None
               ) -> tuple[str, dict[str, Any]] | Rejection:
    """Reads and validates one image: ``(split, raw instance dict)`` or a ``Rejection``.

    The raw instance dict is ``{"image": bytes, "label": str, "key": str}``; the
    split is the record's explicit split or a stable hash of its key. Pure apart from
    reading the file, so it may run on any thread.
    """
    def rejection(reason: str, message: str) -> Rejection:
        return Rejection(key=record.key, source=record.uri, reason=reason, message=message)

    if allowed_labels is not None and record.label not in allowed_labels:
        return rejection(dead_letters.UNKNOWN_LABEL,
                         f"Label {record.label!r} is not in --label_vocabulary.")
    try:
        data = read_bytes(record.uri, limits.max_file_bytes)
    except OSError as e:
        return rejection(dead_letters.UNREADABLE_FILE, f"Cannot read file: {e}")
    problem = validate_image_bytes(data, limits)
    if problem is not None:
        return rejection(*problem)
    split = record.split or splits.assign_split(record.key, fractions)
    return split, {RAW_IMAGE_KEY: data, RAW_LABEL_KEY: record.label,
                   RAW_SOURCE_KEY: record.key}


def default_load_threads() -> int:
    """Threads per ``LoadImages`` instance: one per core, at least 2, at most 16.

    Reading is I/O-bound (remote storage is latency-bound) and TensorFlow's decode
    releases the GIL, so threads overlap both; more than a few per core only adds
    memory (each in-flight image is held whole).
    """
    return max(2, min(16, os.cpu_count() or 1))


class LoadImages(beam.DoFn):
    """``ImageRecord`` → ``(split, raw instance dict)``, or a tagged ``Rejection``.

    Each record goes through :func:`load_image` on a thread pool, with at most
    ``2 × threads`` records in flight per bundle, so reading and validating overlap
    across records. Outputs leave in input order, and every metric and output is
    emitted from the bundle's own thread (Beam's metrics are per-thread). What is
    emitted does not depend on the thread count: each record's result is a pure
    function of the record and its file. Memory: at most ``2 × threads`` files of
    up to ``--max_file_mb`` each are held per DoFn instance (runners such as Dataflow
    run several instances per worker process, one per bundle thread).
    """

    def __init__(self, fractions: splits.SplitFractions,
                 limits: InputLimits = InputLimits(),
                 allowed_labels: frozenset[str] | None = None,
                 threads: int | None = None) -> None:
        if threads is not None and threads < 1:
            raise ValueError(f"LoadImages needs at least one thread, got {threads}.")
        self._fractions = fractions
        self._limits = limits
        self._allowed_labels = allowed_labels
        self._threads = threads

    def setup(self) -> None:
        self._loaded = beam.metrics.Metrics.counter(dead_letters.METRICS_NAMESPACE,
                                                    "images_loaded")
        threads = self._threads or default_load_threads()
        self._max_in_flight = 2 * threads
        self._pool = concurrent.futures.ThreadPoolExecutor(
            max_workers=threads, thread_name_prefix="LoadImages")

    def teardown(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)

    def start_bundle(self) -> None:
        self._in_flight: collections.deque[concurrent.futures.Future] = collections.deque()

    def process(self, record: ImageRecord) -> Iterator[Any]:
        self._in_flight.append(self._pool.submit(
            load_image, record, self._fractions, self._limits, self._allowed_labels))
        while len(self._in_flight) >= self._max_in_flight:
            yield from self._emit(self._in_flight.popleft().result())

    def finish_bundle(self) -> Iterator[Any]:
        while self._in_flight:
            for output in self._emit(self._in_flight.popleft().result()):
                if isinstance(output, beam.pvalue.TaggedOutput):
                    yield beam.pvalue.TaggedOutput(
                        output.tag, window.GlobalWindows.windowed_value(output.value))
                else:
                    yield window.GlobalWindows.windowed_value(output)

    def _emit(self, result: tuple[str, dict[str, Any]] | Rejection) -> Iterator[Any]:
        if not isinstance(result, Rejection):
            self._loaded.inc()
        return dead_letters.route(result)
