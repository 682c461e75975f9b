"""``make_dataset``: an ETL output directory → a tf.data pipeline ready for ``model.fit``.

``make_dataset`` reads as its steps, each a function below, in data order:
plan (check arguments, resolve defaults) → read records (files, per-worker split,
interleave) → decode and store (cache / snapshot only) → the epoch's length from the
manifest → epochs, shuffle and balance →
batch to model input (parse, decode, augment, select) → deliver (data service,
options, prefetch).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import tensorflow as tf

from reader.format import contract
from reader.tfdata import augment as augment_lib
from reader.tfdata import decoding, labels
from reader.tfdata.dataset_info import DatasetInfo, open_dataset
from reader.tfdata.read_config import ReadConfig

AUTOTUNE = tf.data.AUTOTUNE
# Memory the shuffle buffer may take by default (records × bytes per record).
DEFAULT_SHUFFLE_BUFFER_BYTES = 256 * 1024 * 1024
MAX_DEFAULT_SHUFFLE_BUFFER = 10_000
# Records per vectorised parse+decode call on the cached path.
_CACHE_PARSE_BATCH = 64
# Shards read at once by the interleave.
_MAX_CYCLE_LENGTH = 16


def make_dataset(
    data_dir: str,
    split: str = contract.TRAIN,
    batch_size: int = 32,
    *,
    shuffle: bool | None = None,
    seed: int | None = None,
    num_epochs: int | None = 1,
    augment: bool | augment_lib.Augmentation = False,
    cache: str | None = None,
    snapshot: str | None = None,
    balance: bool = False,
    features: Sequence[str] | None = None,
    drop_remainder: bool = False,
    read_config: ReadConfig | None = None,
) -> tf.data.Dataset:
    """Streams a split of an ETL output directory as ``(model input, label)`` batches.

    The pipeline: manifest checks → shard list (shuffled per epoch with ``seed``) →
    per-worker split → parallel interleave of GZIP ``TFRecordDataset``s → shuffle
    buffer → ``batch`` → vectorised ``tf.io.parse_example`` → decode → [augment] →
    [tf.data service] → ``prefetch``. With ``cache`` or ``snapshot`` the decoded
    stream is stored *before* the shuffle buffer, so every epoch still sees a new
    order and new augmentations.

    Example::

        from reader import make_dataset

        train = make_dataset("out/images", "train", 64, seed=7, augment=True,
                             cache="memory")
        val = make_dataset("out/images", "validation", 64)
        model.fit(train, validation_data=val, epochs=10)

    Args:
        data_dir: output directory of the ETL job (must hold ``manifest.json``).
        split: ``"train"``, ``"validation"`` or ``"test"``.
        batch_size: examples per batch (per input pipeline with an ``input_context``).
        shuffle: shuffle files and records; default True for train only.
        seed: makes shuffling and augmentation repeatable run to run (each epoch
            still differs). Also implies ``deterministic=True`` unless set.
        num_epochs: passes over the data; None repeats forever (use with
            ``steps_per_epoch`` in ``model.fit``). With more than one, the shuffle
            buffer spans epoch boundaries (no refill stall); for strict epochs keep
            1 and let ``model.fit(epochs=...)`` re-iterate.
        augment: True (the seeds' defaults) or an ``Augmentation``; runs after the
            cache, on images only.
        cache: None, ``"memory"``, or a file path prefix for ``Dataset.cache``.
        snapshot: directory for ``Dataset.snapshot``: like ``cache`` but persists
            across program restarts and may exceed memory.
        balance: undersample to equal class frequencies, from the manifest's
            per-class counts (single-class datasets only).
        features: None gives the model input tensor (``image`` ``float32 [b, s, s, 3]``
            in ``[0, 1]``, or ``window``), or, for a forecasting dataset with column
            roles, the dict of its model-input blocks (``window``, ``known``,
            ``known_cat``, ``static_cat`` (int64 ids), ``static_real``:
            ``DatasetInfo.model_inputs``), which a Keras functional
            model with inputs of those names takes as is; a list of stored feature names (carried
            columns included) gives a dict; var_len ones (a multi-label dataset's
            ``label`` ids and ``label_name``) are ``tf.RaggedTensor [b, None]``.
        drop_remainder: drop the last partial batch (static batch dimension).
        read_config: rarely needed options (sharding across input pipelines,
            tf.data service, determinism, shuffle buffer size, integrity checks,
            checkpointing); see ``reader.ReadConfig``.

    Returns:
        ``tf.data.Dataset`` of ``(input, label)``: images ``float32 [b, s, s, 3]``;
        time series ``float32 [b, W, F]`` windows. The label is what the dataset
        holds (``reader.tfdata.labels``): ``int64 [b]`` class ids (classification);
        ``float32 [b, num_classes]`` multi-hot (multi-label, ids ``-1`` ignored);
        ``float32 [b, k]`` stored targets (regression); the dict ``{"label": ...,
        "target": float32 [b, k]}`` for classes with targets; ``float32 [b, H, F]``
        (forecast).

        Its cardinality (``len(dataset)``, the steps Keras runs per epoch) is the
        number of batches this input pipeline gets, from the manifest's per-shard
        record counts: ``ceil(records * num_epochs / batch_size)`` (``floor`` with
        ``drop_remainder``), records being this pipeline's share with an
        ``input_context``; infinite with ``num_epochs=None``. It is unknown
        (``tf.data.UNKNOWN_CARDINALITY``) where no count is exact before reading:
        with ``balance`` (a random subset each epoch), ``skip_corrupt``, the tf.data
        service and ``prefetch_to_device``.

    Raises:
        FileNotFoundError: no manifest (the job did not finish).
        reader.DatasetError: a shard is missing, truncated, or fails ``verify``.
        ValueError: invalid arguments (e.g. ``balance`` without single class
            labels), a split the dataset does not have (the message lists those it
            has) or an empty split.
    """
    config = read_config or ReadConfig()
    info = open_dataset(data_dir, splits=[split], verify=config.verify)
    plan = _plan(info, split, batch_size, shuffle=shuffle, seed=seed,
                 num_epochs=num_epochs, augment=augment, cache=cache, snapshot=snapshot,
                 balance=balance, features=features, drop_remainder=drop_remainder,
                 config=config)
    records = _read_records(plan)  # [serialized example], one epoch
    elements = _decode_and_store(records, plan)  # the same, or decoded dicts if stored
    elements = _with_known_length(elements, plan)  # the same, its length from the manifest
    elements = _epochs_shuffle_and_balance(elements, plan)
    batches = _batch_to_model_input(elements, plan)  # (input [b, ...], label [b, ...])
    return _deliver(batches, plan)


@dataclasses.dataclass(frozen=True)
class _Plan:
    """Every decision ``make_dataset`` takes before building a tf.data op."""

    info: DatasetInfo
    split: str
    files: list[str]
    batch_size: int
    shuffle: bool
    seed: int | None
    num_epochs: int | None
    kind: decoding.KindSpec
    augmentation: augment_lib.Augmentation | None
    cache: str | None
    snapshot: str | None
    balance: bool
    features: list[str] | None
    drop_remainder: bool
    deterministic: bool | None
    # With fewer files than input pipelines, every pipeline reads every file in one
    # fixed order and keeps every n-th record; else each reads its own files.
    shard_records: bool
    # Records this input pipeline reads per epoch, from the manifest's per-shard
    # counts; None where the count is not known before reading (skip_corrupt, the
    # tf.data service).
    records_per_epoch: int | None
    symbolic_checkpoint: bool
    config: ReadConfig

    @property
    def stores_decoded(self) -> bool:
        """Whether the decoded stream is stored (cache / snapshot) and replayed."""
        return self.cache is not None or self.snapshot is not None


def _plan(info: DatasetInfo, split: str, batch_size: int, *, shuffle: bool | None,
          seed: int | None, num_epochs: int | None,
          augment: bool | augment_lib.Augmentation, cache: str | None,
          snapshot: str | None, balance: bool, features: Sequence[str] | None,
          drop_remainder: bool, config: ReadConfig) -> _Plan:
    """Checks the arguments against the dataset and resolves every default."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}.")
    if num_epochs is not None and num_epochs < 1:
        raise ValueError(f"num_epochs must be >= 1 or None (forever), got {num_epochs}.")
    if cache is not None and snapshot is not None:
        raise ValueError("Use cache or snapshot, not both.")
    unknown = sorted(set(features or ()) - set(info.feature_spec))
    if unknown:
        raise ValueError(f"Unknown feature(s) {unknown}; {info.data_dir!r} has "
                         f"{sorted(info.feature_spec)}.")
    files = info.shard_paths(split)
    if not files:
        raise ValueError(f"Split {split!r} of {info.data_dir!r} has no records.")
    kind = decoding.kind_spec(info)
    augmentation = augment_lib.Augmentation() if augment is True else augment or None
    if augmentation is not None and not kind.augmentable:
        raise ValueError(f"augment applies to images; {info.data_dir!r} holds "
                         f"{info.kind}.")
    if balance and (reason := labels.balance_error(info)):
        raise ValueError(reason)
    deterministic = config.deterministic
    if deterministic is None and seed is not None:
        deterministic = True
    plan = _Plan(
        info=info, split=split, files=files, batch_size=batch_size,
        shuffle=(split == contract.TRAIN) if shuffle is None else shuffle, seed=seed,
        num_epochs=num_epochs, kind=kind, augmentation=augmentation, cache=cache,
        snapshot=snapshot, balance=balance,
        features=info.model_inputs if features is None else list(features),
        drop_remainder=drop_remainder, deterministic=deterministic,
        shard_records=config.num_workers > len(files),
        records_per_epoch=records_per_epoch(info, split, config),
        symbolic_checkpoint=False, config=config)
    blockers = _symbolic_checkpoint_blockers(plan)
    if config.symbolic_checkpoint and blockers:
        raise ValueError(f"symbolic_checkpoint=True is not possible with "
                         f"{', '.join(blockers)} (tf.data saves those stages only in "
                         f"full); leave it None to fall back to a full checkpoint.")
    symbolic = config.symbolic_checkpoint is not False and not blockers
    return dataclasses.replace(plan, symbolic_checkpoint=symbolic)


def _symbolic_checkpoint_blockers(plan: _Plan) -> list[str]:
    """The options whose tf.data stages cannot be checkpointed symbolically."""
    blockers = []
    if plan.cache is not None:
        blockers.append("cache")
    if plan.snapshot is not None:
        blockers.append("snapshot")
    if plan.balance:
        blockers.append("balance")
    if plan.deterministic is False:
        blockers.append("deterministic=False")
    if plan.num_epochs != 1:
        # tf.data 2.21 saves a repeated stream symbolically but can hang restoring it:
        # the first element after the restore never comes.
        blockers.append(f"num_epochs={plan.num_epochs}")
    if plan.config.data_service is not None:
        blockers.append("data_service")
    return blockers


def records_per_epoch(info: DatasetInfo, split: str, config: ReadConfig) -> int | None:
    """Records one input pipeline reads per epoch, from the manifest's shard counts.

    Mirrors ``_read_records``: with ``num_workers`` pipelines each reads the shards
    ``worker_index::num_workers``, or, with fewer shards than pipelines, every
    ``num_workers``-th record of the split from ``worker_index`` on. None where it
    cannot be known before reading: ``skip_corrupt`` drops what fails its CRC, and
    the tf.data service hands each consumer an unknown part of the epoch.
    """
    if config.skip_corrupt or config.data_service is not None:
        return None
    per_shard = info.shard_num_records(split)
    workers, worker = config.num_workers, config.worker_index
    if workers > len(per_shard):
        return len(range(worker, sum(per_shard), workers))
    return sum(per_shard[worker::workers])


def default_shuffle_buffer(info: DatasetInfo, split: str, decoded: bool) -> int:
    """Records in the default shuffle buffer: at most 10,000 and ~256 MiB.

    The buffer holds serialized records (their mean stored size from the manifest
    stands in for it) or, after a cache or snapshot, decoded ones.
    """
    if decoded:
        bytes_per_record = decoding.kind_spec(info).decoded_record_bytes
    else:
        bytes_per_record = max(1, info.manifest["splits"][split]["num_bytes"]
                               // max(1, info.num_records(split)))
    by_memory = max(1, DEFAULT_SHUFFLE_BUFFER_BYTES // bytes_per_record)
    return max(1, min(MAX_DEFAULT_SHUFFLE_BUFFER, info.num_records(split), by_memory))


def _read_records(plan: _Plan) -> tf.data.Dataset:
    """One epoch of the split's serialized examples, for this input pipeline."""
    config = plan.config
    workers, worker = config.num_workers, config.worker_index
    # [shard path]
    paths = tf.data.Dataset.from_tensor_slices(plan.files)
    if workers > 1 and not plan.shard_records:
        paths = paths.shard(workers, worker)
    if plan.shuffle and not plan.stores_decoded and not plan.shard_records:
        paths = paths.shuffle(len(plan.files), seed=plan.seed,
                              reshuffle_each_iteration=True)

    compression_type = contract.tf_compression_type(plan.info.manifest)

    def read_shard(path: tf.Tensor) -> tf.data.Dataset:
        shard = tf.data.TFRecordDataset(path, compression_type=compression_type)
        if config.skip_corrupt:
            # Each error is logged with its message; a damaged GZIP stream ends the
            # shard there. python -m reader.verify counts what each shard lost.
            shard = shard.ignore_errors(log_warning=True)
        return shard

    # [serialized example]
    in_order = plan.shard_records or plan.stores_decoded
    records = paths.interleave(
        read_shard, cycle_length=min(len(plan.files), _MAX_CYCLE_LENGTH),
        num_parallel_calls=AUTOTUNE,
        deterministic=True if in_order else plan.deterministic)
    if plan.shard_records:
        records = records.shard(workers, worker)
    return records


def _decode_and_store(records: tf.data.Dataset, plan: _Plan) -> tf.data.Dataset:
    """With ``cache``/``snapshot``: decodes once and stores the stream.

    Without either, records pass through undecoded: they are parsed and decoded per
    batch later, which is faster than per record.
    """
    if not plan.stores_decoded:
        return records
    parse = decoding.parse_batch_fn(plan.info.feature_spec)
    # {feature: tensor} with uint8 images, unshuffled.
    elements = (records.batch(_CACHE_PARSE_BATCH)
                .map(parse, num_parallel_calls=AUTOTUNE)
                .map(plan.kind.decode, num_parallel_calls=AUTOTUNE)
                .unbatch())
    if plan.snapshot is not None:
        path = plan.snapshot
        if plan.config.num_workers > 1:
            path = f"{path}/worker-{plan.config.worker_index}"
        elements = elements.snapshot(path)
    else:
        elements = elements.cache("" if plan.cache == "memory" else plan.cache)
    return elements


def _with_known_length(elements: tf.data.Dataset, plan: _Plan) -> tf.data.Dataset:
    """Gives one epoch's stream the length the manifest records, where it is known.

    tf.data cannot count records in files; once this stage states the count, the
    stages after it derive theirs (epochs, batches with or without the remainder), so
    ``len(dataset)`` and Keras know the number of batches. Reading a different
    number of records raises ``InvalidArgumentError`` naming both counts.
    """
    if plan.records_per_epoch is None:
        return elements
    return elements.apply(tf.data.experimental.assert_cardinality(plan.records_per_epoch))


def _epochs_shuffle_and_balance(elements: tf.data.Dataset, plan: _Plan
                                ) -> tf.data.Dataset:
    """Epochs, the shuffle buffer, then (``balance``) the class-balancing filter."""
    if plan.num_epochs != 1:
        # Repeat before the shuffle: the buffer then spans epoch boundaries instead of
        # draining and refilling (a stall of a whole buffer's reads) every epoch.
        elements = elements.repeat(plan.num_epochs)
    if plan.shuffle:
        buffer = plan.config.shuffle_buffer or default_shuffle_buffer(
            plan.info, plan.split, decoded=plan.stores_decoded)
        elements = elements.shuffle(buffer, seed=plan.seed, reshuffle_each_iteration=True)
    if plan.balance:
        label_of = (_label_from_features if plan.stores_decoded
                    else _label_from_serialized(plan.info.feature_spec))
        elements = _balanced(elements, plan.info, plan.split, label_of, plan.seed)
    return elements


def _balanced(dataset: tf.data.Dataset, info: DatasetInfo, split: str,
              label_of: Callable[[Any], tf.Tensor], seed: int | None) -> tf.data.Dataset:
    """Undersamples ``dataset`` to equal class frequencies, by the manifest's counts.

    An example of class ``c`` is kept with probability ``n_min / n_c`` (``n_min``:
    the rarest present class), so each class contributes ~``n_min`` examples per
    epoch and each example at most once; later epochs keep different subsets.
    (``Dataset.rejection_resample`` instead mixes the original stream back in, which
    repeats examples within an epoch.)
    """
    vocab = info.label_vocab
    counts = info.label_counts(split)
    unknown = sorted(set(counts) - set(vocab))
    if unknown:
        raise ValueError(f"balance=True needs every label of split {split!r} in the "
                         f"train vocabulary; not in it: {unknown}.")
    per_class = [counts.get(name, 0) for name in vocab]
    rarest = min(c for c in per_class if c > 0)
    keep = tf.constant([rarest / c if c > 0 else 0.0 for c in per_class], tf.float32)
    draws = tf.data.Dataset.random(seed=seed, rerandomize_each_iteration=True).map(
        lambda r: tf.cast(r % (1 << 24), tf.float32) / float(1 << 24))
    return (tf.data.Dataset.zip((dataset, draws))
            .filter(lambda element, u: u < tf.gather(keep, label_of(element)))
            .map(lambda element, u: element))


def _batch_to_model_input(elements: tf.data.Dataset, plan: _Plan) -> tf.data.Dataset:
    """Batches, then one fused map per batch: parse → decode → float → select.

    One map instead of several leaves fewer tf.data stages to schedule, measured
    faster on 2 cores (``python -m scripts.benchmarks reader_throughput``).
    Augmentation, when asked for, is a second map with its own per-batch seeds.
    """
    batches = elements.batch(plan.batch_size, drop_remainder=plan.drop_remainder)
    parse = decoding.parse_batch_fn(plan.info.feature_spec)
    kind = plan.kind
    select = _select(plan.features, kind.input_key, kind.label)

    def to_model_input(batch: Any) -> Any:
        parsed = batch if plan.stores_decoded else kind.decode(parse(batch))
        features = kind.finish(decoding.var_len_as_ragged(parsed))
        return features if plan.augmentation is not None else select(features)

    batches = batches.map(to_model_input, num_parallel_calls=AUTOTUNE)
    if plan.augmentation is not None:
        batches = _augmented(batches, plan.augmentation, plan.seed).map(
            select, num_parallel_calls=AUTOTUNE)
    return batches


def _deliver(batches: tf.data.Dataset, plan: _Plan) -> tf.data.Dataset:
    """tf.data service, dataset options, then the final prefetch."""
    config = plan.config
    if config.data_service is not None:
        batches = batches.apply(tf.data.experimental.service.distribute(
            processing_mode="distributed_epoch", service=config.data_service,
            job_name=config.data_service_job))
    options = tf.data.Options()
    if plan.deterministic is not None:
        options.deterministic = plan.deterministic
    # Saves each stage's position instead of its buffers (batches of decoded
    # images): a checkpoint of the iterator holds little beyond the shuffle buffer.
    options.experimental_symbolic_checkpoint = plan.symbolic_checkpoint
    if config.input_context is not None:
        # We shard by hand above; tf.distribute must not shard again.
        options.experimental_distribute.auto_shard_policy = (
            tf.data.experimental.AutoShardPolicy.OFF)
    batches = batches.prefetch(AUTOTUNE).with_options(options)
    if config.prefetch_to_device is not None:
        # Must be the last transformation.
        batches = batches.apply(
            tf.data.experimental.prefetch_to_device(config.prefetch_to_device))
    return batches


def _label_from_features(features: dict[str, tf.Tensor]) -> tf.Tensor:
    return features[contract.LABEL_KEY]


def _label_from_serialized(feature_spec: dict[str, Any]) -> Callable[[tf.Tensor], tf.Tensor]:
    label_spec = {contract.LABEL_KEY: feature_spec[contract.LABEL_KEY]}

    def label_of(serialized: tf.Tensor) -> tf.Tensor:
        return tf.io.parse_single_example(serialized, label_spec)[contract.LABEL_KEY]

    return label_of


def _augmented(batches: tf.data.Dataset, augmentation: augment_lib.Augmentation,
               seed: int | None) -> tf.data.Dataset:
    # One [2] stateless seed per batch; a new sequence each epoch, repeatable by seed.
    seeds = tf.data.Dataset.random(seed=seed, rerandomize_each_iteration=True).batch(2)

    def apply(features: dict[str, tf.Tensor], batch_seed: tf.Tensor) -> dict:
        images = augment_lib.augment_images(features[contract.IMAGE_KEY], batch_seed,
                                            augmentation)
        return {**features, contract.IMAGE_KEY: images}

    return tf.data.Dataset.zip((batches, seeds)).map(apply, num_parallel_calls=AUTOTUNE)


def _select(features: list[str] | None, primary: str, label_of: labels.LabelFn
            ) -> Callable[[dict[str, Any]], tuple[Any, Any]]:
    def select(parsed: dict[str, Any]) -> tuple[Any, Any]:
        label = label_of(parsed)
        if features is None:
            return parsed[primary], label
        return {name: parsed[name] for name in features}, label

    return select
