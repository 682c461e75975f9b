"""``ReadConfig``: the reading options most training code never sets."""

from __future__ import annotations

import dataclasses

import tensorflow as tf


@dataclasses.dataclass(frozen=True)
class ReadConfig:
    """Rarely needed options of ``make_dataset``, grouped like TFDS's ``ReadConfig``.

    Example::

        config = reader.ReadConfig(input_context=context, deterministic=False)
        train = reader.make_dataset(data_dir, "train", 64, read_config=config)

    Attributes:
        shuffle_buffer: records in the shuffle buffer; None: at most 10,000 records
            and ~256 MiB (``reader.tfdata.pipeline.default_shuffle_buffer``).
        deterministic: whether parallel stages keep element order. None: True when
            ``make_dataset`` has a ``seed``, else tf.data's default (True). False is
            faster when order does not matter, but no order can then be resumed.
        input_context: from ``strategy.distribute_datasets_from_function``; each
            input pipeline reads its own files (or, with fewer files than
            pipelines, every n-th record).
        data_service: ``"grpc://host:port"`` of a tf.data service dispatcher; the
            pipeline up to augmentation runs on its workers (``distributed_epoch``:
            each record is read once per epoch across all consumers).
        data_service_job: shared job name, so that several trainers split one epoch.
        prefetch_to_device: e.g. ``"/gpu:0"``: prefetch batches onto that device.
        verify: check every shard's sha256 before reading (reads all bytes once).
        skip_corrupt: skip records that fail their CRC (logging each) instead of
            raising ``DataLossError``; ``python -m reader.verify`` reports what each
            damaged shard lost.
        symbolic_checkpoint: how ``tf.train.Checkpoint(iterator=...)`` saves the
            iterator. None: symbolically wherever tf.data supports it (the position
            in each shard, not the prefetched batches), else in full. True insists
            on it (``ValueError`` when the options rule it out); False always saves
            every buffer in full. The shuffle buffer is saved in full either way.
    """

    shuffle_buffer: int | None = None
    deterministic: bool | None = None
    input_context: tf.distribute.InputContext | None = None
    data_service: str | None = None
    data_service_job: str | None = None
    prefetch_to_device: str | None = None
    verify: bool = False
    skip_corrupt: bool = False
    symbolic_checkpoint: bool | None = None

    def __post_init__(self) -> None:
        if self.shuffle_buffer is not None and self.shuffle_buffer < 1:
            raise ValueError(f"shuffle_buffer must be >= 1, got {self.shuffle_buffer}.")
        if self.data_service_job is not None and self.data_service is None:
            raise ValueError("data_service_job names a tf.data service job; set "
                             "data_service to the dispatcher's address too.")
        if (self.data_service is not None and self.input_context is not None
                and self.input_context.num_input_pipelines > 1):
            raise ValueError("With data_service the service splits each epoch across "
                             "consumers (distributed_epoch); do not also pass "
                             "input_context.")

    @property
    def num_workers(self) -> int:
        """Input pipelines reading this split (1 without ``input_context``)."""
        if self.input_context is None:
            return 1
        return max(1, self.input_context.num_input_pipelines)

    @property
    def worker_index(self) -> int:
        """Which of the ``num_workers`` input pipelines this one is."""
        return 0 if self.input_context is None else self.input_context.input_pipeline_id
