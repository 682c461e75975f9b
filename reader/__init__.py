"""Reads the ETL's sharded TFRecord datasets with tf.data (never imports Apache Beam).

Example::

    from reader import make_dataset, steps_per_epoch

    train = make_dataset("out/images", "train", batch_size=64, seed=1, augment=True)
    model.fit(train, epochs=5)
"""

from typing import TYPE_CHECKING, Any

from reader.augment import Augmentation
from reader.dataset_info import DatasetError, DatasetInfo, open_dataset
from reader.helpers import label_vocabulary, steps_per_epoch, transform_output
from reader.pipeline import make_dataset
from reader.read_config import ReadConfig

if TYPE_CHECKING:
    from reader.resume import FitCheckpoint

__all__ = [
    "Augmentation",
    "DatasetError",
    "DatasetInfo",
    "FitCheckpoint",
    "ReadConfig",
    "label_vocabulary",
    "make_dataset",
    "open_dataset",
    "steps_per_epoch",
    "transform_output",
]


def __getattr__(name: str) -> Any:
    # FitCheckpoint subclasses tf.keras's Callback: loading it picks which Keras
    # tf.keras means in this process, so that happens only when it is asked for.
    if name == "FitCheckpoint":
        from reader.resume import FitCheckpoint

        return FitCheckpoint
    raise AttributeError(f"module 'reader' has no attribute {name!r}")
