"""The image job's fused step: a shard's records → read → transform_fn → one shard file.

Only small ``ImageRecord``s (key, uri, label, split) are grouped by shard; each
shard's bytes are read, checked, transformed and written inside one step, so image
bytes never cross a stage boundary (where Beam's local runner would hold them all
in memory).

Each accepted image is decoded exactly once. A JPEG in a layout where libjpeg-turbo
and TensorFlow's decoder agree bit for bit (``image_loading.AGREEING_JPEG_LAYOUTS``,
nearly every photo) is decoded on a read thread by its strict check, at the
transform's DCT scale, and finished there by the steps that follow the decode in
``transform_fn`` (``image_codec.finish``, the same ops); the exported
``transform_fn`` then maps only its label and key. Every other image goes through
the whole ``transform_fn``, decode included. Either way the stored bytes equal
``transform_fn(raw bytes)``, which tests check on a corpus of JPEG layouts.

Inside a shard, three things overlap: a thread pool reads, checks and decodes the
next files, up to ``transform_threads`` batches run through the transform graph
(TensorFlow releases the GIL), and the calling thread writes the finished batches in
order. A batch that fails (one undecodable image fails the whole graph call) is
retried image by image, so only the bad images become dead letters.
"""

from __future__ import annotations

import collections
import concurrent.futures
import dataclasses
import os
import posixpath
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import apache_beam as beam
import numpy as np
from apache_beam.utils import shared

from etl import dead_letters, exif, image_codec, image_loading, sharding
from etl.dead_letters import Rejection
from etl.examples import serialize_example
from etl.image_preprocessing import ImagePreprocessing
from etl.image_sources import ImageRecord
from reader import contract

# Bounds of one batch given to the transform graph: rows, and raw (encoded) bytes.
# Output bytes never depend on batching: every output is computed per image.
BATCH_ROWS = 32
BATCH_BYTES = 16 * 1024 * 1024

# Prints a progress line to stderr after each shard unless set to "0".
PROGRESS_ENV = "ETL_PROGRESS"

# Image shards' zlib level without --gzip_level. Deflate removes about 700 bytes of a
# JPEG record (the tables every JPEG repeats, and the example's feature names) and
# next to nothing of the compressed pixels, at ~25 µs of a core per KB of record. On
# photos at quality 95 that is 26 % of a JPEG shard at 64 px, 9 % at 128 px and 3.7 %
# at 224 px (where it costs ~0.4 ms per record, about a tenth of the job's throughput
# on 2 cores); 2 % of a PNG shard at 64 px and nothing above
# (scripts/measure_gzip_levels.py, docs/benchmarks/gzip_levels.json). So JPEG and PNG
# records of at least these sizes are stored in the GZIP container (level 0, which
# every reader reads unchanged); smaller ones, and raw pixels, are deflated.
STORE_FROM_IMAGE_SIZE = {contract.JPEG: 192, contract.PNG: 64}


def default_gzip_level(image_format: str, image_size: int) -> int:
    """The shard files' zlib level for ``image_size`` px ``image_format`` images
    when ``--gzip_level`` is not given: 0 (stored) or ``sharding.DEFAULT_GZIP_LEVEL``."""
    if image_format not in contract.IMAGE_FORMATS:
        raise ValueError(f"Unknown image format {image_format!r}; use one of "
                         f"{contract.IMAGE_FORMATS}.")
    store_from = STORE_FROM_IMAGE_SIZE.get(image_format)
    if store_from is not None and image_size >= store_from:
        return 0
    return sharding.DEFAULT_GZIP_LEVEL


@dataclasses.dataclass(frozen=True)
class Loaded:
    """An image's record after its checks: either its file bytes, for the transform
    to decode (``data``), or its stored image, already finished from the check's
    decode (``image``; ``data`` is then dropped)."""

    record: ImageRecord
    data: bytes
    image: bytes | None = None

    @property
    def weight(self) -> int:
        """Bytes this item holds."""
        return len(self.data) + len(self.image or b"")


class FinishImage:
    """``image_codec.finish`` for one preprocessing, traced once: a JPEG's decoded
    pixels (``image_loading.Checked``) and its file bytes → its stored image bytes.

    These are the ops ``transform_fn`` applies after its own decode, so the result is
    what ``transform_fn`` gives for the file. Thread-safe: read threads share it.
    """

    def __init__(self, config: ImagePreprocessing) -> None:
        import tensorflow as tf

        self.image_size = config.image_size
        # The concrete function: calling it skips tf.function's per-call argument
        # binding and trace lookup, a tenth of a web-size photo's whole cost.
        self._finish = tf.function(
            lambda pixels, head: image_codec.finish(
                pixels, head, config.image_size, config.image_format, config.jpeg_quality,
                apply_exif_orientation=config.apply_exif_orientation),
        ).get_concrete_function(tf.TensorSpec([None, None, 3], tf.uint8),
                                tf.TensorSpec([], tf.string))

    def __call__(self, pixels: np.ndarray, data: bytes) -> bytes:
        """Raises ``tf.errors.OpError`` if the ops fail (the transform then decodes)."""
        import tensorflow as tf

        # DLPack hands the decoded pixels to TensorFlow without a copy (a copy of a
        # photo's pixels cost as much as a third of its decode); the tensor lives
        # only for this call. The EXIF orientation is read from the file's head.
        image = tf.experimental.dlpack.from_dlpack(pixels.__dlpack__())
        return self._finish(image, tf.constant(data[:exif.EXIF_SCAN_BYTES])).numpy()


def load_record(record: ImageRecord, limits: image_loading.InputLimits,
                finish: FinishImage | None = None) -> Loaded | Rejection:
    """Reads and checks one image; with ``finish``, a JPEG's decode by its check
    (``image_loading.check_image``) is finished into its stored image here."""
    import tensorflow as tf

    def rejection(reason: str, message: str) -> Rejection:
        return Rejection(key=record.key, source=record.uri, reason=reason, message=message)

    try:
        data = image_loading.read_bytes(record.uri, limits.max_file_bytes)
    except OSError as e:
        return rejection(dead_letters.UNREADABLE_FILE, f"Cannot read file: {e}")
    checked = image_loading.check_image(data, limits,
                                        finish.image_size if finish is not None else None)
    if not isinstance(checked, image_loading.Checked):
        return rejection(*checked)
    if finish is None or checked.pixels is None:
        return Loaded(record, data)
    try:
        return Loaded(record, b"", image=finish(checked.pixels, data))
    except tf.errors.OpError:
        return Loaded(record, data)  # The transform's own decode decides.


class ImageTransform:
    """The exported ``transform_fn`` applied to batches of loaded images, eagerly.

    Loaded from ``<output_dir>/transform_fn`` with tf.Transform's own loader (as
    its ``TransformDataset`` does), twice: whole, for images given as file bytes,
    and without its image input, for images already finished (``Loaded.image``):
    that one maps label and key only and never decodes. Thread-safe, so one instance
    per process serves every thread (see :class:`TransformAndWriteImageShard`).
    """

    def __init__(self, transform_fn_dir: str) -> None:
        from tensorflow_transform.saved import saved_transform_io_v2

        whole = saved_transform_io_v2.SavedModelLoader(transform_fn_dir)
        self.output_keys = sorted(whole.structured_outputs)
        whole.finalize([contract.RAW_IMAGE_KEY, contract.RAW_LABEL_KEY,
                        contract.RAW_SOURCE_KEY], self.output_keys)
        self._apply = whole.apply_transform_model
        without_image = saved_transform_io_v2.SavedModelLoader(transform_fn_dir)
        self._label_keys = [key for key in self.output_keys if key != contract.IMAGE_KEY]
        without_image.finalize([contract.RAW_LABEL_KEY, contract.RAW_SOURCE_KEY],
                               self._label_keys)
        self._apply_without_image = without_image.apply_transform_model

    def __call__(self, batch: Sequence[Loaded]) -> dict[str, np.ndarray]:
        """Transformed features of ``batch``: feature name → ``[len(batch)]`` array.

        Raises:
            tf.errors.OpError: if any image of the batch cannot be preprocessed.
        """
        import tensorflow as tf

        def common(items: Sequence[Loaded]) -> dict[str, tf.Tensor]:
            return {
                contract.RAW_LABEL_KEY: tf.constant([item.record.label for item in items],
                                                    tf.string),
                contract.RAW_SOURCE_KEY: tf.constant([item.record.key for item in items],
                                                     tf.string),
            }

        parts: list[tuple[list[int], dict[str, np.ndarray]]] = []
        whole = [i for i, item in enumerate(batch) if item.image is None]
        if whole:
            items = [batch[i] for i in whole]
            outputs = self._apply({contract.RAW_IMAGE_KEY: tf.constant(
                [item.data for item in items], tf.string), **common(items)})
            parts.append((whole, {name: outputs[name].numpy() for name in self.output_keys}))
        finished = [i for i, item in enumerate(batch) if item.image is not None]
        if finished:
            items = [batch[i] for i in finished]
            outputs = self._apply_without_image(common(items))
            values = {name: outputs[name].numpy() for name in self._label_keys}
            values[contract.IMAGE_KEY] = np.array([item.image for item in items],
                                                  dtype=object)
            parts.append((finished, values))
        if len(parts) == 1 and len(parts[0][0]) == len(batch):
            return parts[0][1]
        merged: dict[str, np.ndarray] = {}
        for indices, values in parts:
            for name, column in values.items():
                if name not in merged:
                    merged[name] = np.empty(len(batch), dtype=column.dtype)
                merged[name][indices] = column
        return merged


# What a batch becomes: per image, in order, its serialized example or a rejection.
Outcome = tuple[ImageRecord, bytes] | Rejection


def transform_batch(transform: Callable[[Sequence[Loaded]], dict[str, np.ndarray]],
                    batch: Sequence[Loaded]) -> list[Outcome]:
    """Transforms and serializes ``batch``; isolates images the graph cannot process.

    A failing batch is retried one image at a time: an image that fails alone is a
    ``undecodable_image`` rejection carrying the decoder's message, the others are
    serialized exactly as they would have been in a clean batch.
    """
    import tensorflow as tf

    try:
        outputs = transform(batch)
    except tf.errors.OpError as e:
        if len(batch) > 1:
            return [outcome for item in batch for outcome in transform_batch(transform, [item])]
        item = batch[0]
        image_format = (image_codec.sniff_format(item.data) or "image").upper()
        return [Rejection(key=item.record.key, source=item.record.uri,
                          reason=dead_letters.UNDECODABLE_IMAGE,
                          message=f"TensorFlow cannot decode this {image_format} file: "
                                  f"{image_loading.tf_error_detail(e.message)}")]
    return [(item.record, serialize_example({name: values[i]
                                             for name, values in outputs.items()}))
            for i, item in enumerate(batch)]


def _batches(loaded: Iterable[Loaded | Rejection], rows: int, nbytes: int
             ) -> Iterator[list[Loaded | Rejection]]:
    """Cuts a stream into consecutive runs holding at most ``rows`` images (and about
    ``nbytes`` of them); rejections met on the way stay in their place."""
    run: list[Loaded | Rejection] = []
    images = size = 0
    for item in loaded:
        run.append(item)
        if isinstance(item, Loaded):
            images += 1
            size += item.weight
            if images >= rows or size >= nbytes:
                yield run
                run, images, size = [], 0, 0
    if run:
        yield run


def process_shard(records: Iterable[ImageRecord], transform: Callable[[Sequence[Loaded]],
                                                                       dict[str, np.ndarray]],
                  limits: image_loading.InputLimits,
                  read_pool: concurrent.futures.Executor,
                  transform_pool: concurrent.futures.Executor, *,
                  transform_threads: int, finish: FinishImage | None = None,
                  batch_rows: int = BATCH_ROWS,
                  batch_bytes: int = BATCH_BYTES) -> Iterator[Outcome]:
    """Every record of one shard, in the order given, as an ``Outcome``.

    Reads (with checks, and with ``finish``, a JPEG's one decode and the steps after
    it: :func:`load_record`) run ahead on ``read_pool`` (at most two batches' worth
    in flight) and at
    most ``transform_threads + 1`` batches are transformed at once on
    ``transform_pool``, so memory is bounded by a few batches whatever the shard
    size. The outcomes do not depend on the pools' sizes or timing.
    """
    read_ahead = 2 * batch_rows

    def loaded() -> Iterator[Loaded | Rejection]:
        in_flight: collections.deque[concurrent.futures.Future] = collections.deque()
        for record in records:
            in_flight.append(read_pool.submit(load_record, record, limits, finish))
            if len(in_flight) >= read_ahead:
                yield in_flight.popleft().result()
        while in_flight:
            yield in_flight.popleft().result()

    pending: collections.deque[tuple[list[Loaded | Rejection],
                                     concurrent.futures.Future | None]] = collections.deque()
    for run in _batches(loaded(), batch_rows, batch_bytes):
        batch = [item for item in run if isinstance(item, Loaded)]
        future = transform_pool.submit(transform_batch, transform, batch) if batch else None
        pending.append((run, future))
        while len(pending) > transform_threads:
            yield from _drain(*pending.popleft())
    while pending:
        yield from _drain(*pending.popleft())


def _drain(run: list[Loaded | Rejection], future: concurrent.futures.Future | None
           ) -> Iterator[Outcome]:
    """A run's outcomes in input order: its rejections in place, its images' results
    as they come back from the transform."""
    results = iter(future.result() if future is not None else ())
    for item in run:
        yield next(results) if isinstance(item, Loaded) else item


class _Progress:
    """Per-process progress of the shard step, printed to stderr as shards finish."""

    _lock = threading.Lock()
    _started: float | None = None
    _shards = 0
    _images = 0

    @classmethod
    def start(cls) -> None:
        with cls._lock:
            if cls._started is None:
                cls._started = time.monotonic()

    @classmethod
    def shard_done(cls, images: int, total_shards: int, split: str) -> None:
        if os.environ.get(PROGRESS_ENV, "1") == "0":
            return
        with cls._lock:
            cls._shards += 1
            cls._images += images
            elapsed = max(1e-9, time.monotonic() - (cls._started or time.monotonic()))
            done, written = cls._shards, cls._images
        rate = written / elapsed
        remaining = max(0, total_shards - done)
        eta = elapsed / done * remaining
        print(f"[images] {done}/{total_shards} shards written ({split}); {written} "
              f"images at {rate:.0f} images/s; ETA {_duration(eta)}",
              file=sys.stderr, flush=True)


def _duration(seconds: float) -> str:
    minutes, secs = divmod(round(seconds), 60)
    return f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


def default_read_threads() -> int:
    """Reader threads per process. They read (latency-bound on remote storage) and
    decode and finish JPEGs; more than the cores, so that threads waiting on I/O or
    on TensorFlow's inter-op threads leave the cores to the others. Eight instead of
    four on 2 cores made the job's shard step no faster and used more CPU."""
    return max(4, min(16, 2 * (os.cpu_count() or 1)))


class TransformAndWriteImageShard(beam.DoFn):
    """``((split, shard), [ImageRecord])`` → the shard's pending file; emits its shard
    result (small dict, with label counts) and tagged ``Rejection``s: the image job's
    writer for ``etl.publish.PublishDataset``.

    It waits for the ``transform_written`` side input, then loads
    ``<output_dir>/transform_fn`` once per process (``transform_handle``).
    ``preprocessing`` must be the configuration ``transform_fn`` was built with: its
    read threads finish decoded JPEGs with the same ops (:class:`FinishImage`).
    """

    def __init__(self, output_dir: str, name: str, gzip_level: int,
                 limits: image_loading.InputLimits, transform_handle: shared.Shared,
                 preprocessing: ImagePreprocessing, transform_threads: int = 2,
                 read_threads: int | None = None) -> None:
        if transform_threads < 1:
            raise ValueError(f"transform_threads must be >= 1, got {transform_threads}.")
        self._output_dir = output_dir
        self._name = name
        self._gzip_level = gzip_level
        self._limits = limits
        self._transform_handle = transform_handle
        self._preprocessing = preprocessing
        self._transform_threads = transform_threads
        self._read_threads = read_threads

    def setup(self) -> None:
        self._read_pool = concurrent.futures.ThreadPoolExecutor(
            self._read_threads or default_read_threads(), thread_name_prefix="ReadImages")
        self._transform_pool = concurrent.futures.ThreadPoolExecutor(
            self._transform_threads, thread_name_prefix="TransformImages")
        self._write_pool = concurrent.futures.ThreadPoolExecutor(
            1, thread_name_prefix="WriteImageShard")
        self._finish = FinishImage(self._preprocessing)
        self._written = beam.metrics.Metrics.counter(dead_letters.METRICS_NAMESPACE,
                                                     "images_written")

    def teardown(self) -> None:
        self._read_pool.shutdown(wait=True, cancel_futures=True)
        self._transform_pool.shutdown(wait=True, cancel_futures=True)
        self._write_pool.shutdown(wait=True)

    def process(self, element: tuple[tuple[str, int], Iterable[ImageRecord]],
                num_shards: dict[str, int], transform_written: list[Any]
                ) -> Iterator[Any]:
        del transform_written  # Only ordering: the transform_fn is final on disk.
        (split, shard), records = element
        _Progress.start()
        transform_dir = posixpath.join(self._output_dir, contract.TRANSFORM_FN_DIRNAME)
        transform = self._transform_handle.acquire(
            lambda: ImageTransform(transform_dir), tag=transform_dir)
        ordered = sorted(records, key=lambda r: sharding.shard_sort_key(r.key))
        relpath = sharding.pending_relpath(self._name, split, shard)
        labels: collections.Counter[str] = collections.Counter()
        rejections: list[Rejection] = []
        with sharding.ShardWriter(posixpath.join(self._output_dir, relpath),
                                  self._gzip_level) as writer, sharding.BlockWriter(
                                      writer, self._write_pool) as blocks:
            # Finished examples are written a batch at a time, on the writer thread
            # (deflate included), while this thread gathers the next batch.
            block: list[bytes] = []
            for outcome in process_shard(ordered, transform, self._limits, self._read_pool,
                                         self._transform_pool,
                                         transform_threads=self._transform_threads,
                                         finish=self._finish):
                if isinstance(outcome, Rejection):
                    rejections.append(outcome)
                    continue
                record, serialized = outcome
                block.append(serialized)
                labels[record.label] += 1
                if len(block) >= BATCH_ROWS:
                    blocks.write(block)
                    block = []
            blocks.write(block)
        self._written.inc(writer.num_records)
        for rejection in rejections:
            yield from dead_letters.route(rejection)
        _Progress.shard_done(writer.num_records, sum(num_shards.values()), split)
        yield sharding.shard_result(split, shard, relpath, writer,
                                    label_counts=sorted(labels.items()))
