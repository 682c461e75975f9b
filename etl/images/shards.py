"""The image job's fused step: a shard's records → read → transform_fn → one shard file.

Only small ``ImageRecord``s (key, uri, label, split) are grouped by shard; each
shard's bytes are read, checked, transformed and written inside one step, so image
bytes never cross a stage boundary (where Beam's local runner would hold them all
in memory).

Each accepted image is decoded exactly once. A JPEG in a layout where libjpeg-turbo
and TensorFlow's decoder agree bit for bit (``loading.AGREEING_JPEG_LAYOUTS``,
nearly every photo) is decoded by its strict check, at the transform's DCT scale,
in its batch's buffer, and finished by the steps that follow the decode in
``transform_fn`` (``codec.finish``, the same ops, one graph call per batch);
the exported ``transform_fn`` then maps only its label and key. Every other image
goes through the whole ``transform_fn``, decode included. Either way the stored
bytes equal ``transform_fn(raw bytes)``, which tests check on a corpus of JPEG
layouts.

Inside a shard, three things overlap: a thread pool reads and checks the next files,
up to ``transform_threads`` batches are decoded and run through the graphs
(libjpeg-turbo and TensorFlow release the GIL), and the calling thread writes the
finished batches in order. A batch that fails (one undecodable image fails the whole
graph call) is retried image by image, so only the bad images become dead letters.
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

from etl.core import dead_letters, sharding
from etl.core.dead_letters import Rejection
from etl.core.examples import serialize_example
from etl.images import codec, exif, loading
from etl.images.preprocessing import ImagePreprocessing
from etl.images.sources import ImageRecord
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
class DecodedPixels:
    """A decoded image's ``uint8 [height, width, 3]`` pixels, row-major at ``offset``
    in ``buffer`` (1-D, ``loading.TENSOR_ALIGNMENT``-aligned), which a batch's
    images share so that TensorFlow takes them in one piece, without a copy; decoded
    at DCT scale ``1 / ratio`` from a ``source`` (height, width) image."""

    buffer: np.ndarray
    offset: int
    height: int
    width: int
    source: tuple[int, int]
    ratio: int

    @classmethod
    def of(cls, pixels: np.ndarray, plan: loading.JpegDecode) -> DecodedPixels:
        """``uint8 [h, w, 3]`` pixels decoded as ``plan`` says, in a buffer of their own."""
        buffer = loading.aligned_buffer(pixels.size)
        buffer[:] = pixels.reshape(-1)
        return cls(buffer, 0, pixels.shape[0], pixels.shape[1],
                   (plan.source_height, plan.source_width), plan.ratio)

    def array(self) -> np.ndarray:
        size = self.height * self.width * 3
        return self.buffer[self.offset:self.offset + size].reshape(self.height, self.width, 3)


@dataclasses.dataclass(frozen=True)
class Loaded:
    """An image's record and file bytes after the checks made before decoding. ``jpeg``
    is set for a JPEG the job decodes itself, ``pixels`` once it has (in its batch,
    :func:`decode_batch`); the transform decodes every other image."""

    record: ImageRecord
    data: bytes
    jpeg: loading.JpegDecode | None = None
    pixels: DecodedPixels | None = None

    @property
    def weight(self) -> int:
        """Bytes this item holds once decoded."""
        return len(self.data) + (self.jpeg.nbytes if self.jpeg is not None else 0)


class FinishImages:
    """``codec.finish`` for one preprocessing, traced once: the decoded pixels
    of a batch of JPEGs and their files' bytes → their stored image bytes.

    These are the ops ``transform_fn`` applies after its own decode, so each result
    is what ``transform_fn`` gives for that file. One graph call per batch (a
    ``tf.map_fn`` over the images): a call per image cost more interpreter time than
    the image's own resize. Thread-safe.
    """

    def __init__(self, config: ImagePreprocessing) -> None:
        import tensorflow as tf

        def finish(buffer: tf.Tensor, offsets: tf.Tensor, shapes: tf.Tensor,
                   heads: tf.Tensor) -> tf.Tensor:
            # shapes: [n, (height, width, source height, source width, ratio)]
            def one(i: tf.Tensor) -> tf.Tensor:
                height, width = shapes[i, 0], shapes[i, 1]
                image = tf.reshape(buffer[offsets[i]:offsets[i] + height * width * 3],
                                   tf.stack([height, width, 3]))
                image.set_shape([None, None, 3])
                return codec.finish(
                    image, heads[i], config.image_size, config.image_format,
                    config.jpeg_quality, apply_exif_orientation=config.apply_exif_orientation,
                    source_shape=tf.cast(shapes[i, 2:4], tf.int32),
                    ratio=tf.cast(shapes[i, 4], tf.int32))

            return tf.map_fn(one, tf.range(tf.shape(offsets)[0]),
                             fn_output_signature=tf.TensorSpec([], tf.string))

        self.image_size = config.image_size
        # The concrete function: calling it skips tf.function's argument binding.
        self._finish = tf.function(finish).get_concrete_function(
            tf.TensorSpec([None], tf.uint8), tf.TensorSpec([None], tf.int64),
            tf.TensorSpec([None, 5], tf.int64), tf.TensorSpec([None], tf.string))

    def __call__(self, pixels: Sequence[DecodedPixels], data: Sequence[bytes]) -> list[bytes]:
        """Stored images of ``pixels`` (decoded from the files ``data``), in order.

        Raises:
            tf.errors.OpError: if the ops fail.
        """
        import tensorflow as tf

        buffer = pixels[0].buffer
        if any(p.buffer is not buffer for p in pixels):
            pixels = _into_one_buffer(pixels)
            buffer = pixels[0].buffer
        # DLPack hands the pixels to TensorFlow without a copy; the EXIF orientation is
        # read from each file's head only.
        images = self._finish(
            tf.experimental.dlpack.from_dlpack(buffer.__dlpack__()),
            tf.constant([p.offset for p in pixels], tf.int64),
            tf.constant([(p.height, p.width, *p.source, p.ratio) for p in pixels], tf.int64),
            tf.constant([d[:exif.EXIF_SCAN_BYTES] for d in data], tf.string))
        return list(images.numpy())


def _slot_bytes(nbytes: int) -> int:
    """``nbytes`` rounded up so that the next image in a shared buffer stays aligned."""
    return -(-nbytes // loading.TENSOR_ALIGNMENT) * loading.TENSOR_ALIGNMENT


def _into_one_buffer(pixels: Sequence[DecodedPixels]) -> list[DecodedPixels]:
    buffer = loading.aligned_buffer(sum(_slot_bytes(p.height * p.width * 3)
                                              for p in pixels))
    placed, offset = [], 0
    for p in pixels:
        size = p.height * p.width * 3
        buffer[offset:offset + size] = p.array().reshape(-1)
        placed.append(dataclasses.replace(p, buffer=buffer, offset=offset))
        offset += _slot_bytes(size)
    return placed


def load_record(record: ImageRecord, limits: loading.InputLimits,
                image_size: int | None = None) -> Loaded | Rejection:
    """Reads and checks one image without decoding it (size, format, header pixels,
    and the strict check of images the transform decodes); with ``image_size``, a
    JPEG the job can decode itself is planned for its batch (``Loaded.jpeg``)."""
    def rejection(reason: str, message: str) -> Rejection:
        return Rejection(key=record.key, source=record.uri, reason=reason, message=message)

    try:
        data = loading.read_bytes(record.uri, limits.max_file_bytes)
    except OSError as e:
        return rejection(dead_letters.UNREADABLE_FILE, f"Cannot read file: {e}")
    checked = loading.check_image(data, limits, image_size)
    if not isinstance(checked, loading.Checked):
        return rejection(*checked)
    return Loaded(record, data, jpeg=checked.jpeg)


def decode_batch(batch: Sequence[Loaded], strict: bool) -> list[Loaded | Rejection]:
    """Decodes the planned JPEGs of ``batch`` (``Loaded.jpeg``) into one shared buffer:
    each such image comes back with its ``pixels``, as a rejection (strict decoding:
    libjpeg-turbo reports damage) or unplanned, for the transform to decode."""
    planned = [item.jpeg.nbytes for item in batch if item.jpeg is not None]
    if not planned:
        return list(batch)
    buffer = loading.aligned_buffer(sum(_slot_bytes(n) for n in planned))
    decoded: list[Loaded | Rejection] = []
    offset = 0
    for item in batch:
        if item.jpeg is None:
            decoded.append(item)
            continue
        plan = item.jpeg
        result = loading.decode_jpeg_into(
            item.data, plan, buffer[offset:offset + plan.nbytes], strict)
        if isinstance(result, tuple):
            decoded.append(Rejection(key=item.record.key, source=item.record.uri,
                                     reason=result[0], message=result[1]))
        elif result is None:
            decoded.append(dataclasses.replace(item, jpeg=None))
        else:
            decoded.append(dataclasses.replace(item, pixels=DecodedPixels(
                buffer, offset, plan.height, plan.width,
                (plan.source_height, plan.source_width), plan.ratio)))
        offset += _slot_bytes(plan.nbytes)
    return decoded


class ImageTransform:
    """The exported ``transform_fn`` applied to batches of loaded images, eagerly.

    Loaded from ``<output_dir>/transform_fn`` with tf.Transform's own loader (as
    its ``TransformDataset`` does), twice: whole, for images given as file bytes,
    and without its image input, for JPEGs the job decoded itself (``Loaded.pixels``):
    their stored images come from ``FinishImages`` (the ops ``transform_fn`` runs after
    its decode, for ``preprocessing``, the configuration ``transform_fn`` was built
    with), and ``transform_fn`` maps only their labels and keys. Thread-safe, so one
    instance per process serves every thread (see :class:`TransformAndWriteImageShard`).
    """

    def __init__(self, transform_fn_dir: str, preprocessing: ImagePreprocessing) -> None:
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
        self._finish = FinishImages(preprocessing)

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
        whole = [i for i, item in enumerate(batch) if item.pixels is None]
        if whole:
            items = [batch[i] for i in whole]
            outputs = self._apply({contract.RAW_IMAGE_KEY: tf.constant(
                [item.data for item in items], tf.string), **common(items)})
            parts.append((whole, {name: outputs[name].numpy() for name in self.output_keys}))
        finished = [i for i, item in enumerate(batch) if item.pixels is not None]
        if finished:
            items = [batch[i] for i in finished]
            outputs = self._apply_without_image(common(items))
            values = {name: outputs[name].numpy() for name in self._label_keys}
            values[contract.IMAGE_KEY] = np.array(
                self._finish([item.pixels for item in items], [item.data for item in items]),
                dtype=object)
            parts.append((finished, values))
        if len(parts) == 1:
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
                    batch: Sequence[Loaded], strict: bool = True) -> list[Outcome]:
    """Decodes the JPEGs of ``batch`` planned for it (:func:`decode_batch`), then
    transforms and serializes the batch; isolates images the graph cannot process.

    A failing batch is retried one image at a time: an image that fails alone is a
    ``undecodable_image`` rejection carrying the decoder's message (a JPEG decoded
    here is first retried through the transform's own decode), the others are
    serialized exactly as they would have been in a clean batch.
    """
    decoded = decode_batch(batch, strict)
    loaded = [item for item in decoded if isinstance(item, Loaded)]
    results = iter(_transform_loaded(transform, loaded) if loaded else [])
    return [next(results) if isinstance(item, Loaded) else item for item in decoded]


def _transform_loaded(transform: Callable[[Sequence[Loaded]], dict[str, np.ndarray]],
                      batch: Sequence[Loaded]) -> list[Outcome]:
    import tensorflow as tf

    try:
        outputs = transform(batch)
    except tf.errors.OpError as e:
        if len(batch) > 1:
            return [outcome for item in batch
                    for outcome in _transform_loaded(transform, [item])]
        item = batch[0]
        if item.pixels is not None:
            return _transform_loaded(transform, [dataclasses.replace(
                item, jpeg=None, pixels=None)])
        image_format = (codec.sniff_format(item.data) or "image").upper()
        return [Rejection(key=item.record.key, source=item.record.uri,
                          reason=dead_letters.UNDECODABLE_IMAGE,
                          message=f"TensorFlow cannot decode this {image_format} file: "
                                  f"{loading.tf_error_detail(e.message)}")]
    return [(item.record, serialize_example({name: values[i]
                                             for name, values in outputs.items()}))
            for i, item in enumerate(batch)]


def _batches(loaded: Iterable[Loaded | Rejection], rows: int, nbytes: int
             ) -> Iterator[list[Loaded | Rejection]]:
    """Cuts a stream into consecutive runs holding at most ``rows`` images (and about
    ``nbytes`` of them, decoded pixels included); rejections met on the way stay in
    their place."""
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
                  limits: loading.InputLimits,
                  read_pool: concurrent.futures.Executor,
                  transform_pool: concurrent.futures.Executor, *,
                  transform_threads: int, image_size: int | None = None,
                  batch_rows: int = BATCH_ROWS,
                  batch_bytes: int = BATCH_BYTES) -> Iterator[Outcome]:
    """Every record of one shard, in the order given, as an ``Outcome``.

    Reads and checks (:func:`load_record`; with ``image_size``, JPEGs are planned for
    the job's own decode) run ahead on ``read_pool`` (at most two batches' worth in
    flight) and at most ``transform_threads + 1`` batches are decoded and transformed
    at once on ``transform_pool``, so memory is bounded by a few batches whatever the
    shard size. The outcomes do not depend on the pools' sizes or timing.
    """
    read_ahead = 2 * batch_rows

    def loaded() -> Iterator[Loaded | Rejection]:
        in_flight: collections.deque[concurrent.futures.Future] = collections.deque()
        for record in records:
            in_flight.append(read_pool.submit(load_record, record, limits, image_size))
            if len(in_flight) >= read_ahead:
                yield in_flight.popleft().result()
        while in_flight:
            yield in_flight.popleft().result()

    pending: collections.deque[tuple[list[Loaded | Rejection],
                                     concurrent.futures.Future | None]] = collections.deque()
    for run in _batches(loaded(), batch_rows, batch_bytes):
        batch = [item for item in run if isinstance(item, Loaded)]
        future = (transform_pool.submit(transform_batch, transform, batch,
                                        limits.strict_decoding) if batch else None)
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
    """Reader threads per process: they read and check files, which is I/O-bound
    (remote storage is latency-bound); the decodes and the graphs run on the
    transform threads."""
    return max(4, min(16, 2 * (os.cpu_count() or 1)))


class TransformAndWriteImageShard(beam.DoFn):
    """``((split, shard), [ImageRecord])`` → the shard's pending file; emits its shard
    result (small dict, with label counts) and tagged ``Rejection``s: the image job's
    writer for ``etl.core.publish.PublishDataset``.

    It waits for the ``transform_written`` side input, then loads
    ``<output_dir>/transform_fn`` once per process (``transform_handle``).
    ``preprocessing`` must be the configuration ``transform_fn`` was built with: the
    JPEGs the step decodes itself are finished with the same ops (:class:`FinishImages`).
    """

    def __init__(self, output_dir: str, name: str, gzip_level: int,
                 limits: loading.InputLimits, transform_handle: shared.Shared,
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
            lambda: ImageTransform(transform_dir, self._preprocessing), tag=transform_dir)
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
                                         image_size=self._preprocessing.image_size):
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
