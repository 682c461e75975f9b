"""``make_dataset``: an ETL output directory → a tf.data pipeline ready for ``model.fit``."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import tensorflow as tf

from etl import contract
from reader import augment as augment_lib
from reader import decoding
from reader.dataset_info import FORECAST, DatasetInfo, open_dataset

AUTOTUNE = tf.data.AUTOTUNE
# Memory the shuffle buffer may take by default (records × bytes per record).
DEFAULT_SHUFFLE_BUFFER_BYTES = 256 * 1024 * 1024
MAX_DEFAULT_SHUFFLE_BUFFER = 10_000
# Records per vectorised parse+decode call on the cached path.
_CACHE_PARSE_BATCH = 64


def _worker_split(input_context: tf.distribute.InputContext | None, num_files: int
                  ) -> tuple[int, int, bool]:
    """(num_workers, worker_index, shard_records_instead_of_files)."""
    if input_context is None or input_context.num_input_pipelines <= 1:
        return 1, 0, False
    n, i = input_context.num_input_pipelines, input_context.input_pipeline_id
    # Fewer files than workers: every worker reads every file and keeps every n-th
    # record, which needs one fixed record order across workers.
    return n, i, num_files < n


def default_shuffle_buffer(info: DatasetInfo, split: str, decoded: bool) -> int:
    """Records in the default shuffle buffer: at most 10,000 and ~256 MiB."""
    if decoded:
        bytes_per_record = decoding.kind_spec(info).decoded_record_bytes
    else:
        bytes_per_record = max(1, info.manifest["splits"][split]["num_bytes"]
                               // max(1, info.num_records(split)))
    by_memory = max(1, DEFAULT_SHUFFLE_BUFFER_BYTES // bytes_per_record)
    return max(1, min(MAX_DEFAULT_SHUFFLE_BUFFER, info.num_records(split), by_memory))


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
    input_context: tf.distribute.InputContext | None = None,
    deterministic: bool | None = None,
    drop_remainder: bool = False,
    shuffle_buffer: int | None = None,
    balance: bool = False,
    features: Sequence[str] | None = None,
    data_service: str | None = None,
    data_service_job: str | None = None,
    prefetch_to_device: str | None = None,
    verify: bool = False,
    skip_corrupt: bool = False,
) -> tf.data.Dataset:
    """Streams a split of an ETL output directory as ``(features, label)`` batches.

    The pipeline: manifest checks → shard list (shuffled per epoch with ``seed``) →
    per-worker sharding → parallel interleave of GZIP ``TFRecordDataset``s → shuffle
    buffer → ``batch`` → vectorised ``tf.io.parse_example`` → parallel decode →
    [cache / snapshot] → [augmentation] → [tf.data service] → ``prefetch``. With
    ``cache`` or ``snapshot`` the decoded stream is stored *before* the shuffle
    buffer, so every epoch still sees a new order and new augmentations.

    Example::

        from reader import make_dataset, steps_per_epoch

        train = make_dataset("out/images", "train", batch_size=64, seed=7,
                             augment=True, cache="memory")
        val = make_dataset("out/images", "validation", batch_size=64)
        model.fit(train, validation_data=val, epochs=10)

    Args:
        data_dir: output directory of the ETL job (must hold ``manifest.json``).
        split: ``"train"``, ``"validation"`` or ``"test"``.
        batch_size: examples per batch (per worker when ``input_context`` is given).
        shuffle: shuffle files and records; default True for train only.
        seed: makes shuffling and augmentation repeatable run to run (each epoch
            still differs). Also implies ``deterministic=True`` unless set.
        num_epochs: passes over the data; None repeats forever. With more than one,
            the shuffle buffer spans epoch boundaries (no refill stall); for strict
            epochs keep 1 and let ``model.fit(epochs=...)`` re-iterate.
        augment: True (seeds' defaults) or an ``Augmentation``; runs after the cache.
        cache: None, ``"memory"``, or a file path prefix for ``Dataset.cache``.
        snapshot: directory for ``Dataset.snapshot``: like ``cache`` but persists
            across program restarts and may exceed memory.
        input_context: from ``strategy.distribute_datasets_from_function``; each
            input pipeline reads its own files (or, with fewer files than pipelines,
            every n-th record).
        deterministic: whether parallel stages keep element order. None: True when
            ``seed`` is given, else tf.data's default. False is faster when order
            does not matter.
        drop_remainder: drop the last partial batch (static batch dimension).
        shuffle_buffer: records in the shuffle buffer; default ≤ 10,000 and ~256 MiB.
        balance: resample to equal class frequencies (``rejection_resample`` with the
            manifest's per-class counts as the initial distribution).
        features: None gives the model input tensor (``image``, ``float32 [b, s, s, 3]``
            in ``[0, 1]``); a list of feature names gives a dict of those features.
        data_service: ``"grpc://host:port"`` of a tf.data service dispatcher; the
            pipeline up to augmentation runs on its workers (``distributed_epoch``:
            each record is read once per epoch across all consumers).
        data_service_job: shared job name so several trainers split one epoch.
        prefetch_to_device: e.g. ``"/gpu:0"``: prefetch batches onto that device.
        verify: check every shard's sha256 before reading (reads all bytes once).
        skip_corrupt: skip records that fail their CRC (logging each) instead of
            raising ``DataLossError``; off by default. ``python -m reader.verify``
            reports how many records each damaged shard lost.

    Returns:
        ``tf.data.Dataset`` of ``(features, label)`` with ``label`` ``int64 [batch]``.

    Raises:
        FileNotFoundError: no manifest (the job did not finish).
        reader.DatasetError: a shard is missing, truncated, or fails ``verify``.
        ValueError: invalid arguments or an empty split.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}.")
    if cache is not None and snapshot is not None:
        raise ValueError("Use cache or snapshot, not both.")
    if (data_service is not None and input_context is not None
            and input_context.num_input_pipelines > 1):
        raise ValueError("With data_service the service splits each epoch across "
                         "consumers (distributed_epoch); do not also pass input_context.")
    info = open_dataset(data_dir, splits=[split], verify=verify)
    unknown = sorted(set(features or ()) - set(info.feature_spec))
    if unknown:
        raise ValueError(f"Unknown feature(s) {unknown}; {data_dir!r} has "
                         f"{sorted(info.feature_spec)}.")
    files = info.shard_paths(split)
    if not files:
        raise ValueError(f"Split {split!r} of {data_dir!r} has no records.")
    shuffle = (split == contract.TRAIN) if shuffle is None else shuffle
    if deterministic is None and seed is not None:
        deterministic = True
    kind = decoding.kind_spec(info)
    augmentation = (augment_lib.Augmentation() if augment is True
                    else augment or None)
    if augmentation is not None and not kind.augmentable:
        raise ValueError(f"augment applies to images; {data_dir!r} holds {info.kind}.")
    parse = decoding.parse_batch_fn(info.feature_spec)
    decode = kind.decode
    reuse = cache is not None or snapshot is not None

    num_workers, worker, shard_records = _worker_split(input_context, len(files))
    # [shard path]
    paths = tf.data.Dataset.from_tensor_slices(files)
    if num_workers > 1 and not shard_records:
        paths = paths.shard(num_workers, worker)
    if shuffle and not reuse and not shard_records:
        paths = paths.shuffle(len(files), seed=seed, reshuffle_each_iteration=True)
    # [serialized example]
    def read_shard(path: tf.Tensor) -> tf.data.Dataset:
        shard = tf.data.TFRecordDataset(path, compression_type=contract.COMPRESSION)
        if skip_corrupt:
            # Each error is logged with its message; a damaged GZIP stream ends the
            # shard there. python -m reader.verify counts what each shard lost.
            shard = shard.apply(tf.data.experimental.ignore_errors(log_warning=True))
        return shard

    records = paths.interleave(
        read_shard, cycle_length=min(len(files), 16), num_parallel_calls=AUTOTUNE,
        deterministic=True if (shard_records or reuse) else deterministic)
    if shard_records:
        records = records.shard(num_workers, worker)

    if reuse:
        # {feature: tensor} with uint8 images, decoded once and then replayed.
        elements = (records.batch(_CACHE_PARSE_BATCH)
                    .map(parse, num_parallel_calls=AUTOTUNE)
                    .map(decode, num_parallel_calls=AUTOTUNE)
                    .unbatch())
        if snapshot is not None:
            path = snapshot if num_workers == 1 else f"{snapshot}/worker-{worker}"
            elements = elements.snapshot(path)
        else:
            elements = elements.cache("" if cache == "memory" else cache)
        label_of: Callable[[Any], tf.Tensor] = _label_from_features
    else:
        elements = records
        label_of = _label_from_serialized(info.feature_spec) if balance else _no_label

    if num_epochs != 1:
        # Repeat before the shuffle: the buffer then spans epoch boundaries instead of
        # draining and refilling (a stall of a whole buffer's reads) every epoch.
        elements = elements.repeat(num_epochs)
    if shuffle:
        buffer = shuffle_buffer or default_shuffle_buffer(info, split, decoded=reuse)
        elements = elements.shuffle(buffer, seed=seed, reshuffle_each_iteration=True)
    if balance:
        if info.task == FORECAST:
            raise ValueError("balance=True needs class labels; this is a forecasting "
                             "dataset.")
        elements = _balanced(elements, info, split, label_of, seed)
    batches = elements.batch(batch_size, drop_remainder=drop_remainder)
    select = _select(features, kind.input_key, kind.label_key)

    # One fused map per batch (parse → decode → float → select): fewer tf.data
    # stages to schedule, measured faster on 2 cores (scripts/benchmark_reader.py).
    def to_model_input(batch: Any) -> Any:
        parsed = batch if reuse else decode(parse(batch))
        features_ = kind.finish(parsed)
        return features_ if augmentation is not None else select(features_)

    batches = batches.map(to_model_input, num_parallel_calls=AUTOTUNE)
    if augmentation is not None:
        batches = _augmented(batches, augmentation, seed).map(
            select, num_parallel_calls=AUTOTUNE)

    if data_service is not None:
        batches = batches.apply(tf.data.experimental.service.distribute(
            processing_mode="distributed_epoch", service=data_service, job_name=data_service_job))
    options = tf.data.Options()
    if deterministic is not None:
        options.deterministic = deterministic
    if input_context is not None:
        # We shard by hand above; tf.distribute must not shard again.
        options.experimental_distribute.auto_shard_policy = (
            tf.data.experimental.AutoShardPolicy.OFF)
    batches = batches.prefetch(AUTOTUNE).with_options(options)
    if prefetch_to_device is not None:
        # Must be the last transformation.
        batches = batches.apply(tf.data.experimental.prefetch_to_device(prefetch_to_device))
    return batches


def _label_from_features(features: dict[str, tf.Tensor]) -> tf.Tensor:
    return features[contract.LABEL_KEY]


def _no_label(element: Any) -> tf.Tensor:
    raise AssertionError("labels are only read when balance=True")


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


def _select(features: Sequence[str] | None, primary: str, label_key: str
            ) -> Callable[[dict[str, tf.Tensor]], tuple[Any, tf.Tensor]]:
    names = None if features is None else list(features)

    def select(parsed: dict[str, tf.Tensor]) -> tuple[Any, tf.Tensor]:
        label = parsed[label_key]
        if names is None:
            return parsed[primary], label
        return {n: parsed[n] for n in names}, label

    return select
