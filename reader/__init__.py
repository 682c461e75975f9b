"""Reads the ETL's sharded TFRecord datasets: with tf.data (``make_dataset``, needs
TensorFlow only), or by index without TensorFlow (``ShardedRecords``, for PyTorch and
JAX/Grain; datasets written with ``--compression=none``).

Example::

    from reader import make_dataset, steps_per_epoch

    train = make_dataset("out/images", "train", batch_size=64, seed=1, augment=True)
    model.fit(train, epochs=5)

Inside: ``tfdata/`` the tf.data reader (the one part that needs TensorFlow);
``records`` the records by index, TF-free; ``format/`` the on-disk contract both
sides share; ``stats/`` statistics, schema and drift; ``report/`` the HTML report;
the commands ``verify``, ``preview`` and ``export_tfds``; ``quiet`` TensorFlow's
log level.

The names below load on first use: ``import reader`` itself imports nothing heavy,
so the ETL can import ``reader.format.contract`` without the tf.data pipeline, and
``FitCheckpoint`` (a tf.keras callback) does not decide which Keras ``tf.keras``
means in a process that never asks for it. Importing ``reader`` before ``tensorflow``
hides TensorFlow's C++ warnings (``reader.quiet``) unless ``TF_CPP_MIN_LOG_LEVEL`` is set.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from reader.quiet import quiet_tensorflow_logs

# TensorFlow's C++ warnings hidden unless the user set TF_CPP_MIN_LOG_LEVEL (reader.quiet).
quiet_tensorflow_logs()

if TYPE_CHECKING:
    from reader.records import ShardedRecords
    from reader.tfdata.augment import Augmentation
    from reader.tfdata.dataset_info import DatasetError, DatasetInfo, open_dataset
    from reader.tfdata.helpers import label_vocabulary, steps_per_epoch, transform_output
    from reader.tfdata.pipeline import make_dataset
    from reader.tfdata.read_config import ReadConfig
    from reader.tfdata.resume import FitCheckpoint

# Public name → the module that defines it.
_EXPORTS = {
    "Augmentation": "reader.tfdata.augment",
    "DatasetError": "reader.tfdata.dataset_info",
    "DatasetInfo": "reader.tfdata.dataset_info",
    "FitCheckpoint": "reader.tfdata.resume",
    "ReadConfig": "reader.tfdata.read_config",
    "ShardedRecords": "reader.records",
    "label_vocabulary": "reader.tfdata.helpers",
    "make_dataset": "reader.tfdata.pipeline",
    "open_dataset": "reader.tfdata.dataset_info",
    "steps_per_epoch": "reader.tfdata.helpers",
    "transform_output": "reader.tfdata.helpers",
}

__all__ = [
    "Augmentation",
    "DatasetError",
    "DatasetInfo",
    "FitCheckpoint",
    "ReadConfig",
    "ShardedRecords",
    "label_vocabulary",
    "make_dataset",
    "open_dataset",
    "steps_per_epoch",
    "transform_output",
]


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'reader' has no attribute {name!r}")
    value = getattr(importlib.import_module(_EXPORTS[name]), name)
    globals()[name] = value  # Later lookups skip this function.
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
