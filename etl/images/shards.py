"""The image job's fused step: a shard's records → read → transform_fn → one shard file.

Only small ``ImageRecord``s (key, uri, label, split) are grouped by shard; each
shard's bytes are read, checked, transformed and written inside one step, so image
bytes never cross a stage boundary (where Beam's local runner would hold them all
in memory).

Each accepted image is decoded exactly once. A JPEG in a layout where libjpeg-turbo
and TensorFlow's decoder agree bit for bit (``loading.AGREEING_JPEG_LAYOUTS``,
nearly every photo) is decoded by its strict check, at the transform's DCT scale,
in its batch's buffer; every other image by ``transform_fn``'s own decode
(``codec.decode_rgb``). All are finished by the steps that follow the decode in
``transform_fn`` (``codec.finish``, the same ops, one graph call per batch), and
the exported ``transform_fn`` maps only their labels and keys. The stored bytes
equal ``transform_fn(raw bytes)``, which tests check on a corpus of JPEG layouts.
The duplicate signatures (``duplicates.signatures``) are taken from those pixels.

Inside a shard, three things overlap: a thread pool reads and checks the next files
(``etl.images.batches``), up to ``transform_threads`` (one per core) batches are
decoded and run through the graphs (libjpeg-turbo and TensorFlow release the GIL),
and the shard step's frame (``etl.core.shards.step``) writes the finished blocks in
order. A batch that fails (one undecodable image fails the whole graph call) is retried
image by image, so only the bad images become dead letters.
"""

from __future__ import annotations

import collections
import concurrent.futures
import dataclasses
import functools
import secrets
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import numpy as np
from apache_beam.utils import shared

from etl.core import cores, dead_letters
from etl.core.dead_letters import Rejection
from etl.core.io import storage
from etl.core.shards import files as shard_files
from etl.core.shards import placement
from etl.core.shards.files import ShardFormat
from etl.core.shards.step import ShardBlock, ShardStep, load_transform_fn
from etl.core.transform.examples import serialize_example
from etl.images import codec, loading, progress
from etl.images import facts as image_facts
from etl.images import labels as image_labels
from etl.images.batches import (
    Loaded,
    batches,
    decode_batch,
    finish_images,
    load_record,
    read_ahead,
)
from etl.images.labels import ONE_CLASS, LabelColumns
from etl.images.preprocessing import ImagePreprocessing, serving_feature_spec
from etl.images.sources import ImageRecord
from reader.format import contract

# Bounds of one batch given to the transform graph: rows, and bytes of files and JPEG
# pixels (``Loaded.buffer_bytes``); what batches weigh is bounded in process_shard.
# Output bytes never depend on batching: every output is computed per image.
BATCH_ROWS = 32
BATCH_BYTES = 16 * 1024 * 1024

# Image shards' zlib level without --gzip_level. Deflate removes the tables every JPEG
# repeats and the example's feature names, and next to nothing of compressed pixels,
# so from these sizes up it saves too little to pay for its CPU time
# (scripts/measure_gzip_levels.py and docs/benchmarks/gzip_levels.json, in git at
# 6b89e51; docs/BENCHMARKS.md): JPEG and PNG records are stored in the GZIP container
# (level 0, which every reader reads unchanged); smaller ones, and raw pixels, are
# deflated.
STORE_FROM_IMAGE_SIZE = {contract.JPEG: 192, contract.PNG: 64}


def default_gzip_level(image_format: str, image_size: int) -> int:
    """The shard files' zlib level for ``image_size`` px ``image_format`` images
    when ``--gzip_level`` is not given: 0 (stored) or ``shard_files.DEFAULT_GZIP_LEVEL``."""
    if image_format not in contract.IMAGE_FORMATS:
        raise ValueError(f"Unknown image format {image_format!r}; use one of "
                         f"{contract.IMAGE_FORMATS}.")
    store_from = STORE_FROM_IMAGE_SIZE.get(image_format)
    if store_from is not None and image_size >= store_from:
        return 0
    return shard_files.DEFAULT_GZIP_LEVEL


def raw_inputs(records: Sequence[ImageRecord], columns: LabelColumns) -> dict[str, Any]:
    """The raw inputs of ``records`` besides their image bytes, as ``transform_fn``
    takes them (``serving_feature_spec(columns)``): a set of class names as a
    ``SparseTensor`` row, targets as ``float32 [batch, k]``."""
    import tensorflow as tf

    inputs: dict[str, Any] = {
        contract.RAW_SOURCE_KEY: tf.constant([r.key for r in records], tf.string)}
    if columns.label_column is not None and columns.multi_label:
        names = [image_labels.label_names(r.label) for r in records]
        indices = [[row, i] for row, row_names in enumerate(names)
                   for i in range(len(row_names))]
        inputs[contract.RAW_LABEL_KEY] = tf.SparseTensor(
            tf.constant(indices, tf.int64, shape=[len(indices), 2]),
            tf.constant([n for row_names in names for n in row_names], tf.string),
            [len(records), max((len(n) for n in names), default=0)])
    elif columns.label_column is not None:
        inputs[contract.RAW_LABEL_KEY] = tf.constant([r.label for r in records], tf.string)
    if columns.target_columns:
        inputs[contract.TARGET_KEY] = tf.constant(
            np.array([r.targets for r in records], np.float32).reshape(
                len(records), len(columns.target_columns)))
    for index, name in enumerate(columns.carry_columns):
        inputs[name] = tf.constant([r.carried[index] for r in records], tf.string)
    return inputs


class ImageTransform:
    """The exported ``transform_fn`` applied to batches of loaded images, eagerly.

    Each image is decoded once: a JPEG the job decoded itself (``Loaded.pixels``)
    as it is, any other by ``transform_fn``'s own decode (``FinishImages.decode``).
    The stored images come from ``FinishImages`` (the ops ``transform_fn`` runs after
    its decode, for ``preprocessing``, the configuration ``transform_fn`` was built
    with), and the ``transform_fn`` loaded from ``transform_fn_dir`` without its image
    input maps the labels and keys. With ``hash_images``, each image's duplicate
    signatures are taken from those same pixels (``etl.images.duplicates.signatures``); with
    ``statistics``, its facts and quality measures (``etl.images.facts``).
    Thread-safe, so one instance per process serves every thread (see
    :class:`TransformAndWriteImageShard`).
    """

    def __init__(self, transform_fn_dir: str, preprocessing: ImagePreprocessing,
                 columns: LabelColumns = ONE_CLASS, hash_images: bool = False,
                 statistics: bool = False) -> None:
        inputs = sorted(serving_feature_spec(columns))
        self._apply_without_image = load_transform_fn(
            transform_fn_dir, [key for key in inputs if key != contract.RAW_IMAGE_KEY],
            leave_out=[contract.IMAGE_KEY])
        self.output_keys = sorted([*self._apply_without_image.output_keys,
                                   contract.IMAGE_KEY])
        self._finish = finish_images(preprocessing, thumbnails=hash_images,
                                     quality=statistics)
        self._columns = columns
        self._hash_images = hash_images
        self._statistics = statistics

    def __call__(self, batch: Sequence[Loaded]
                 ) -> tuple[dict[str, np.ndarray], list[dict[str, Any] | None]]:
        """Transformed features of ``batch`` (feature name → ``[len(batch)]`` array)
        and each image's facts (``etl.images.facts``; None without ``hash_images``
        and ``statistics``).

        Raises:
            tf.errors.OpError: if any image of the batch cannot be preprocessed.
        """
        others = [item.data for item in batch if item.pixels is None]
        decoded_others = iter(self._finish.decode(others) if others else ())
        decoded = [item.pixels if item.pixels is not None else next(decoded_others)
                   for item in batch]
        finished = self._finish(decoded, [item.data for item in batch])
        values = self._apply_without_image(
            raw_inputs([item.record for item in batch], self._columns))
        values[contract.IMAGE_KEY] = np.array([f.stored for f in finished], dtype=object)
        if not (self._hash_images or self._statistics):
            return values, [None] * len(batch)
        return values, image_facts.batch_facts(batch, decoded, finished, self._columns,
                                               self._hash_images, self._statistics)


# What a batch becomes: per image, in order, its serialized example (and facts) or a
# rejection.
Outcome = tuple[ImageRecord, bytes, dict[str, Any] | None] | Rejection


def transform_batch(transform: ImageTransform,
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


def _transform_loaded(transform: ImageTransform, batch: Sequence[Loaded]
                      ) -> list[Outcome]:
    import tensorflow as tf

    try:
        outputs, facts = transform(batch)
    except tf.errors.OpError as e:
        if len(batch) > 1:
            return [outcome for item in batch
                    for outcome in _transform_loaded(transform, [item])]
        item = batch[0]
        if item.pixels is not None:
            return _transform_loaded(transform, [dataclasses.replace(
                item, jpeg=None, pixels=None)])
        image_format = (codec.sniff_format(item.data) or "image").upper()
        return [Rejection(key=item.record.key, source=item.record.source,
                          reason=dead_letters.UNDECODABLE_IMAGE,
                          message=f"TensorFlow cannot decode this {image_format} file: "
                                  f"{loading.tf_error_detail(e.message)}")]
    return [_outcome(item.record, {name: values[i] for name, values in outputs.items()},
                     facts[i])
            for i, item in enumerate(batch)]


def _outcome(record: ImageRecord, features: dict[str, Any],
             facts: dict[str, Any] | None) -> Outcome:
    """The serialized example, or a ``non_finite_target`` rejection where a finite
    target left float32's range when normalised (a value far from a tiny train
    spread): an infinite target would silently break training."""
    target = features.get(contract.TARGET_KEY)
    if target is not None and not np.all(np.isfinite(target)):
        return Rejection(key=record.key, source=record.source,
                         reason=dead_letters.NON_FINITE_TARGET,
                         message=f"Targets {list(record.targets)} normalise to "
                                 f"{target.tolist()} with the train mean and std (beyond "
                                 f"float32); use --normalize_targets=none or rescale them.")
    return record, serialize_example(features), facts



def process_shard(records: Iterable[ImageRecord], transform: ImageTransform,
                  limits: loading.InputLimits,
                  read_pool: concurrent.futures.Executor,
                  transform_pool: concurrent.futures.Executor, *,
                  transform_threads: int, image_size: int | None = None,
                  read_timeout_s: float | None = None,
                  composite_alpha: bool = False,
                  batch_rows: int = BATCH_ROWS,
                  batch_bytes: int = BATCH_BYTES) -> Iterator[Outcome]:
    """Every record of one shard, in the order given, as an ``Outcome``.

    Reads and checks (:func:`load_record`; ``image_size`` plans JPEGs for the job's
    own decode, it and ``composite_alpha`` weigh each image) run ahead on
    ``read_pool`` (:func:`read_ahead`: two batches' worth of files at most). At most
    ``transform_threads + 1`` batches are decoded and transformed at once on
    ``transform_pool``, and only while their weights (``Loaded.weight``) add up to at
    most ``limits.decode_budget_bytes``: a batch weighs at most ``1 /
    (transform_threads + 1)`` of it, a heavier image is a batch of its own that waits
    for room, and one heavier than the budget was refused as it was read. So memory
    is bounded whatever the shard and its images. The outcomes do not depend on the
    pools' sizes or timing, but for a read longer than ``read_timeout_s``: it is
    given up (``read_timed_out``).
    """
    load = functools.partial(load_record, limits=limits, image_size=image_size,
                             read_timeout_s=read_timeout_s, composite_alpha=composite_alpha)
    budget = limits.decode_budget_bytes  # pending: (run, its future, its weight)
    pending: collections.deque[tuple[list[Loaded | Rejection],
                                     concurrent.futures.Future | None, int]] = (
        collections.deque())
    for run in batches(read_ahead(records, load, read_pool, 2 * batch_rows,
                                  limits.max_file_bytes), batch_rows, batch_bytes,
                       max_weight=budget // (transform_threads + 1)):
        batch = [item for item in run if isinstance(item, Loaded)]
        weight = sum(item.weight for item in batch)
        while pending and weight + sum(w for _, _, w in pending) > budget:
            yield from _drain(*pending.popleft()[:2])
        future = (transform_pool.submit(transform_batch, transform, batch,
                                        limits.strict_decoding) if batch else None)
        pending.append((run, future, weight))
        while len(pending) > transform_threads:
            yield from _drain(*pending.popleft()[:2])
    while pending:
        yield from _drain(*pending.popleft()[:2])


def _drain(run: list[Loaded | Rejection], future: concurrent.futures.Future | None
           ) -> Iterator[Outcome]:
    """A run's outcomes in input order: its rejections in place, its images' results
    as they come back from the transform."""
    results = iter(future.result() if future is not None else ())
    for item in run:
        yield next(results) if isinstance(item, Loaded) else item


def default_transform_threads() -> int:
    """Transform threads per process: one per core it may use, at least 2."""
    return max(2, cores.usable())


def default_read_threads() -> int:
    """Reader threads per process: reading and checking files is I/O-bound (remote
    storage latency-bound); decodes and graphs run on the transform threads."""
    return max(4, min(16, 2 * cores.usable()))


class TransformAndWriteImageShard(ShardStep):
    """``((split, shard), [ImageRecord])`` → the shard's pending file; emits its
    ``ShardResult`` (with label counts), tagged ``Rejection``s and, with
    ``hash_images`` or ``statistics``, each written image's facts
    (``etl.images.facts``: its signatures, its quality measures): the
    image job's writer for ``etl.core.publishing.tail.PublishDataset``.

    ``preprocessing`` must be the configuration ``transform_fn`` was built with: the
    JPEGs the step decodes itself are finished with the same ops (:class:`FinishImages`).
    A file whose read takes longer than ``read_timeout_s`` (None: no limit) is given
    up, a ``read_timed_out`` dead letter.
    """

    WRITTEN_COUNTER = "images_written"

    def __init__(self, output_dir: str, name: str, shard_format: ShardFormat,
                 limits: loading.InputLimits, transform_handle: shared.Shared,
                 preprocessing: ImagePreprocessing, transform_threads: int | None = None,
                 read_threads: int | None = None, columns: LabelColumns = ONE_CLASS,
                 hash_images: bool = False, statistics: bool = False,
                 read_timeout_s: float | None = None) -> None:
        transform_threads = transform_threads or default_transform_threads()
        if transform_threads < 1:
            raise ValueError(f"transform_threads must be >= 1, got {transform_threads}.")
        super().__init__(output_dir, name, shard_format, transform_handle)
        self._limits = limits
        self._preprocessing = preprocessing
        self._columns = columns
        self._hash_images = hash_images
        self._statistics = statistics
        self._transform_threads = transform_threads
        self._read_threads = read_threads
        self._read_timeout_s = read_timeout_s
        # Names this run's progress count in each worker process; never in the output.
        self._progress_run = secrets.token_hex(8)

    def setup(self) -> None:
        super().setup()
        self._read_pool = concurrent.futures.ThreadPoolExecutor(
            self._read_threads or default_read_threads(), thread_name_prefix="ReadImages")
        self._transform_pool = concurrent.futures.ThreadPoolExecutor(
            self._transform_threads, thread_name_prefix="TransformImages")

    def teardown(self) -> None:
        self._read_pool.shutdown(wait=True, cancel_futures=True)
        self._transform_pool.shutdown(wait=True, cancel_futures=True)
        super().teardown()

    def load_transform(self, transform_fn_dir: str) -> ImageTransform:
        return ImageTransform(transform_fn_dir, self._preprocessing, self._columns,
                              self._hash_images, self._statistics)

    def transform_blocks(self, units: Iterable[ImageRecord], transform: ImageTransform
                         ) -> Iterator[ShardBlock]:
        progress.start(self._progress_run)
        ordered = sorted(units, key=lambda r: placement.shard_sort_key(r.key))
        examples: list[bytes] = []
        labels: list[str] = []
        rejections: list[Rejection] = []
        facts: list[dict[str, Any]] = []
        for outcome in process_shard(ordered, transform, self._limits, self._read_pool,
                                     self._transform_pool,
                                     transform_threads=self._transform_threads,
                                     image_size=self._preprocessing.image_size,
                                     read_timeout_s=self._read_timeout_s,
                                     composite_alpha=(self._preprocessing.alpha_background
                                                      is not None)):
            if isinstance(outcome, Rejection):
                rejections.append(outcome)
                continue
            record, serialized, fields = outcome
            examples.append(serialized)
            labels.extend(image_labels.label_names(record.label))
            if fields is not None:
                facts.append(fields)
            if len(examples) >= BATCH_ROWS:
                yield ShardBlock(examples, labels, rejections, facts)
                examples, labels, rejections, facts = [], [], [], []
        yield ShardBlock(examples, labels, rejections, facts)

    def input_identities(self, units: Sequence[ImageRecord]) -> list[str]:
        """Each record with its file's size and mtime (stat on the read threads): a
        file rewritten in place changes its shard's inputs."""
        return list(self._read_pool.map(_record_with_file_stat, units))

    def shard_written(self, result: placement.ShardResult, num_shards: dict[str, int],
                      kept: bool) -> None:
        progress.shard_done(self._progress_run, result.num_records,
                            sum(num_shards.values()), result.split, kept)


def _record_with_file_stat(record: ImageRecord) -> str:
    """The record's identity with its file's size and mtime: as listed, else looked
    up now ("missing" if there is no file, "unknown" if its metadata cannot be
    read)."""
    if record.listed is not None:
        return f"{record.identity()}|{record.listed[0]}:{record.listed[1]!r}"
    try:
        found = storage.stat(record.uri)
    except OSError:
        state = "unknown"
    else:
        state = "missing" if found is None else f"{found.size}:{found.mtime!r}"
    return f"{record.identity()}|{state}"
