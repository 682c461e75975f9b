"""An image shard's loaded files and their batches' JPEG decode.

Files are read and checked (:func:`load_record`) ahead of the transform; a JPEG in
a layout where libjpeg-turbo and TensorFlow's decoder agree bit for bit
(``loading.AGREEING_JPEG_LAYOUTS``) is planned for the job's own decode, which
:func:`decode_batch` does for a batch at a time into one shared, aligned buffer.
:class:`FinishImages` then runs the steps ``transform_fn`` takes after its decode on
those pixels, one graph call per batch.
"""

from __future__ import annotations

import collections
import concurrent.futures
import dataclasses
import functools
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import numpy as np

from etl.core import dead_letters
from etl.core.dead_letters import Rejection
from etl.core.io import storage, timed_calls
from etl.images import codec, exif, loading
from etl.images.preprocessing import ImagePreprocessing
from etl.images.sources import ImageRecord

# Bytes of files read ahead of their batch, at most (read_ahead).
READ_AHEAD_BYTES = 256 * 1024 * 1024


@dataclasses.dataclass(frozen=True)
class DecodedPixels:
    """A decoded image's ``uint8 [height, width, 3]`` pixels, row-major at ``offset``
    in ``buffer`` (1-D, ``loading.TENSOR_ALIGNMENT``-aligned), which a batch's
    images share so that TensorFlow takes them in one piece, without a copy; decoded
    at DCT scale ``1 / ratio`` from a ``source`` (height, width) image. ``tensor`` is
    the TensorFlow tensor ``buffer`` views, for pixels TensorFlow decoded: they go
    back to it as they are (DLPack cannot export the read-only view)."""

    buffer: np.ndarray
    offset: int
    height: int
    width: int
    source: tuple[int, int]
    ratio: int
    tensor: Any = None

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
    :func:`decode_batch`); the transform decodes every other image. ``weight`` is
    what it holds at its decode's peak, file included (``loading.decode_weight``;
    :func:`load_record` sets it)."""

    record: ImageRecord
    data: bytes
    jpeg: loading.JpegDecode | None = None
    pixels: DecodedPixels | None = None
    header: loading.ImageHeader | None = None
    weight: int = 0

    @property
    def buffer_bytes(self) -> int:
        """Bytes this item holds from its read to its batch's end: its file and, for a
        JPEG the job decodes, its pixels."""
        return len(self.data) + (self.jpeg.nbytes if self.jpeg is not None else 0)


@dataclasses.dataclass(frozen=True)
class Finished:
    """One image after :class:`FinishImages`: its stored bytes, the ``uint8 [32, 32]``
    grey thumbnail of the pixels they encode (before a lossy encode), which the
    perceptual hash reads, the EXIF orientation that turned it (1: as stored), the
    ``uint8 [32, 32, 3]`` colour thumbnail it is made from (``codec.thumbnails``) and
    the ``uint8 [side, side]`` luma (``codec.sharpness_thumbnail``) the quality
    measures read."""

    stored: bytes
    thumbnail: np.ndarray
    orientation: int
    quality: np.ndarray
    luma: np.ndarray


class FinishImages:
    """``codec.finish`` for one preprocessing, traced once: the decoded pixels
    of a batch of images and their files' bytes → their stored images.

    These are the ops ``transform_fn`` applies after its own decode, so each result
    is what ``transform_fn`` gives for that file. One graph call per batch (a
    ``tf.map_fn`` over the images): a call per image costs more interpreter time than
    the image's own resize (or a small PNG's decode). :meth:`decode` is
    ``transform_fn``'s own decode, for the images the job does not decode itself, a
    batch of them a call too. With neither ``thumbnails`` (the duplicate report)
    nor ``quality`` (the statistics), the thumbnails are zeros; either takes both,
    from one resize; the sharpness's luma is taken with ``quality`` only. Thread-safe.
    """

    def __init__(self, config: ImagePreprocessing, thumbnails: bool = True,
                 quality: bool = False) -> None:
        import tensorflow as tf

        size = config.image_size
        small = codec.thumbnail_shapes(size, quality)  # grey, colour, luma

        def finish(buffer: tf.Tensor, offsets: tf.Tensor, shapes: tf.Tensor,
                   heads: tf.Tensor) -> tuple[tf.Tensor, ...]:
            # shapes: [n, (height, width, source height, source width, ratio)]
            def one(i: tf.Tensor) -> tuple[tf.Tensor, ...]:
                height, width = shapes[i, 0], shapes[i, 1]
                image = tf.reshape(buffer[offsets[i]:offsets[i] + height * width * 3],
                                   tf.stack([height, width, 3]))
                image.set_shape([None, None, 3])
                pixels, orientation = codec.finish_pixels(
                    image, heads[i], size,
                    apply_exif_orientation=config.apply_exif_orientation,
                    source_shape=tf.cast(shapes[i, 2:4], tf.int32),
                    ratio=tf.cast(shapes[i, 4], tf.int32))
                return (codec.encode(pixels, config.image_format, config.jpeg_quality),
                        orientation, *codec.finish_thumbnails(
                            pixels, small, thumbnails or quality, quality))

            return tf.map_fn(one, tf.range(tf.shape(offsets)[0]), fn_output_signature=(
                tf.TensorSpec([], tf.string), tf.TensorSpec([], tf.int32),
                *(tf.TensorSpec(shape, tf.uint8) for shape in small)))

        def decode(data: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
            # data: [n] files → each image's pixels, flattened (a ragged row), and
            # [n, (height, width, source height, source width, ratio)]
            def one(file: tf.Tensor) -> tuple[tf.RaggedTensor, tf.Tensor]:
                image = codec.decode_rgb(file, alpha_background=config.alpha_background,
                                         image_size=size)
                source, ratio = codec.source_geometry(file, image, size)
                return tf.reshape(image, [-1]), tf.cast(tf.concat(
                    [tf.shape(image)[:2], source, [ratio]], 0), tf.int64)

            return tf.map_fn(one, data, fn_output_signature=(
                tf.RaggedTensorSpec([None], tf.uint8, ragged_rank=0),
                tf.TensorSpec([5], tf.int64)))

        self.image_size = size
        # The concrete functions: calling them skips tf.function's argument binding.
        # Without autograph (the codec's ops branch with tf.cond themselves): its
        # rewriting cost 2.9 s of the 3.5 s trace, paid by every worker process.
        self._finish = tf.function(finish, autograph=False).get_concrete_function(
            tf.TensorSpec([None], tf.uint8), tf.TensorSpec([None], tf.int64),
            tf.TensorSpec([None, 5], tf.int64), tf.TensorSpec([None], tf.string))
        # Traced at its first use: a job of JPEGs alone never calls it (the shard
        # step decodes them itself), and its trace is a third of the two.
        self._decode_fn = tf.function(decode, autograph=False)
        self._decode_lock = threading.Lock()
        self._decode: Any = None

    def _traced_decode(self) -> Any:
        import tensorflow as tf

        with self._decode_lock:
            if self._decode is None:
                self._decode = self._decode_fn.get_concrete_function(
                    tf.TensorSpec([None], tf.string))
            return self._decode

    def decode(self, data: Sequence[bytes]) -> list[DecodedPixels]:
        """The pixels ``transform_fn`` decodes each file of ``data`` to
        (``codec.decode_rgb``, at the DCT scale for the output size), in one shared
        buffer: one graph call for them all.

        Raises:
            tf.errors.OpError: if TensorFlow cannot decode one of them.
        """
        import tensorflow as tf

        pixels, geometry = self._traced_decode()(tf.constant(list(data), tf.string))
        # A view of TensorFlow's buffer, not a copy: an image at --max_image_pixels is
        # 192 MiB of pixels, and .numpy() and realigning cost a copy each.
        flat = pixels.flat_values
        values, splits = np.from_dlpack(flat), pixels.row_splits.numpy().tolist()
        return [DecodedPixels(values, start, height, width, tuple(source), ratio, flat)
                for start, (height, width, *source, ratio) in zip(
                    splits[:-1], geometry.numpy().tolist(), strict=True)]

    def __call__(self, pixels: Sequence[DecodedPixels], data: Sequence[bytes]
                 ) -> list[Finished]:
        """``pixels`` (decoded from the files ``data``) finished, in order.

        Raises:
            tf.errors.OpError: if the ops fail.
        """
        import tensorflow as tf

        buffer = pixels[0].buffer
        if any(p.buffer is not buffer for p in pixels):
            pixels = _into_one_buffer(pixels)
            buffer = pixels[0].buffer
        # DLPack hands TensorFlow the pixels without a copy; EXIF came from the file heads.
        tensor = pixels[0].tensor
        outputs = self._finish(
            tf.experimental.dlpack.from_dlpack(buffer.__dlpack__()) if tensor is None
            else tensor,
            tf.constant([p.offset for p in pixels], tf.int64),
            tf.constant([(p.height, p.width, *p.source, p.ratio) for p in pixels], tf.int64),
            tf.constant([d[:exif.EXIF_SCAN_BYTES] for d in data], tf.string))
        # (stored, orientation, grey thumbnail, colour thumbnail, luma) per image
        return [Finished(s, t, int(o), q, luma) for s, o, t, q, luma in zip(
            *(output.numpy() for output in outputs), strict=True)]


@functools.cache
def finish_images(config: ImagePreprocessing, thumbnails: bool = True,
                  quality: bool = False) -> FinishImages:
    """The process's one ``FinishImages`` per configuration: its graphs are traced
    once per process, not once per job (a test session, a notebook, a worker that
    runs several jobs' shard steps)."""
    return FinishImages(config, thumbnails=thumbnails, quality=quality)


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
        placed.append(dataclasses.replace(p, buffer=buffer, offset=offset, tensor=None))
        offset += _slot_bytes(size)
    return placed


def load_record(record: ImageRecord, limits: loading.InputLimits,
                image_size: int | None = None,
                read_timeout_s: float | None = None,
                composite_alpha: bool = False) -> Loaded | Rejection:
    """Reads and checks one image without decoding it (size, format, header pixels,
    what its decode would hold, and the strict check of images the transform
    decodes); with ``image_size``, a JPEG the job can decode itself is planned for its
    batch (``Loaded.jpeg``). ``image_size`` and ``composite_alpha`` (images with alpha
    are composited on ``--alpha_background``) weigh it (``Loaded.weight``).

    A FIFO, socket or device is rejected unopened (``not_a_regular_file``); with
    ``read_timeout_s``, a read that takes longer is given up (``read_timed_out``)."""
    def rejection(reason: str, message: str) -> Rejection:
        return Rejection(key=record.key, source=record.source, reason=reason, message=message)

    try:
        read = functools.partial(storage.read_bytes, record.uri, limits.max_file_bytes)
        data = (read() if read_timeout_s is None else
                timed_calls.within(read_timeout_s, read, f"Reading {record.uri!r}"))
    except storage.NotARegularFile as e:
        return rejection(dead_letters.NOT_A_REGULAR_FILE, str(e))
    except timed_calls.TimedOut as e:
        return rejection(dead_letters.READ_TIMED_OUT,
                         f"{e} (--read_timeout_s; a stalled mount or device?)")
    except OSError as e:
        return rejection(dead_letters.UNREADABLE_FILE, f"Cannot read file: {e}")
    checked = loading.check_image(data, limits, image_size, composite_alpha)
    if not isinstance(checked, loading.Checked):
        return rejection(*checked)
    return Loaded(record, data, jpeg=checked.jpeg, header=checked.header,
                  weight=checked.weight)


def read_ahead(records: Iterable[ImageRecord],
               load: Callable[[ImageRecord], Loaded | Rejection],
               pool: concurrent.futures.Executor, max_files: int, unlisted_bytes: int,
               max_bytes: int = READ_AHEAD_BYTES) -> Iterator[Loaded | Rejection]:
    """``load`` (:func:`load_record`) of each record, in order, run ahead on ``pool``:
    at most ``max_files`` files and about ``max_bytes`` of them ahead. A file not yet
    read counts as its listed size, or ``unlisted_bytes`` (the file limit) when the
    input gave none (a manifest's rows)."""
    held = HeldBytes()
    ahead: collections.deque[tuple[list[int | None], Any]] = collections.deque()

    def give_out() -> Loaded | Rejection:
        entry, future = ahead.popleft()
        held.release(entry)  # Nothing is read ahead while it is waited for.
        return future.result()

    for record in records:
        estimate = min(record.listed[0] if record.listed else unlisted_bytes,
                       unlisted_bytes)
        while ahead and (len(ahead) >= max_files or estimate + held.total > max_bytes):
            yield give_out()
        future = pool.submit(load, record)
        ahead.append((held.track(estimate, future), future))
    while ahead:
        yield give_out()


class HeldBytes:
    """What the reads ahead hold: each counts as its estimate until its read ends,
    then as its file's size (a failed read keeps its estimate). Settled by each
    read's thread as it ends: summing the queue per record cost the shard's main
    thread 0.26 ms of the GIL per web photo."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.total = 0

    def track(self, estimate: int, future: concurrent.futures.Future) -> list[int | None]:
        """Counts ``future``'s read; the entry to :meth:`release` once it is given out."""
        entry: list[int | None] = [estimate]
        with self._lock:
            self.total += estimate

        def settle(done: concurrent.futures.Future) -> None:
            if not done.cancelled() and done.exception() is None:
                item = done.result()
                size = len(item.data) if isinstance(item, Loaded) else 0
                with self._lock:
                    if entry[0] is not None:  # Not given out yet.
                        self.total, entry[0] = self.total + size - entry[0], size

        future.add_done_callback(settle)
        return entry

    def release(self, entry: list[int | None]) -> None:
        with self._lock:
            self.total, entry[0] = self.total - (entry[0] or 0), None


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
            decoded.append(Rejection(key=item.record.key, source=item.record.source,
                                     reason=result[0], message=result[1]))
        elif result is None:
            decoded.append(dataclasses.replace(item, jpeg=None))
        else:
            decoded.append(dataclasses.replace(item, pixels=DecodedPixels(
                buffer, offset, plan.height, plan.width,
                (plan.source_height, plan.source_width), plan.ratio)))
        offset += _slot_bytes(plan.nbytes)
    return decoded


def batches(loaded: Iterable[Loaded | Rejection], rows: int, nbytes: int,
            max_weight: int | None = None) -> Iterator[list[Loaded | Rejection]]:
    """Cuts a stream into consecutive runs holding at most ``rows`` images, about
    ``nbytes`` of files and pixels (``Loaded.buffer_bytes``) and, with
    ``max_weight``, at most that much weight (``Loaded.weight``: what their decodes
    hold), but for an image heavier alone, which is a run of its own (images
    weighing 300, 200, 600 and 100 with ``max_weight=500``: [300, 200], [600],
    [100]); rejections met on the way stay in their place.
    """
    run: list[Loaded | Rejection] = []
    images = size = weight = 0
    for item in loaded:
        if (isinstance(item, Loaded) and max_weight is not None and images
                and weight + item.weight > max_weight):
            yield run
            run, images, size, weight = [], 0, 0, 0
        run.append(item)
        if isinstance(item, Loaded):
            images += 1
            size += item.buffer_bytes
            weight += item.weight
            if (images >= rows or size >= nbytes
                    or (max_weight is not None and weight >= max_weight)):
                yield run
                run, images, size, weight = [], 0, 0, 0
    if run:
        yield run

