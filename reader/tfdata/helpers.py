"""Small helpers training code needs next to ``make_dataset``."""

from __future__ import annotations

import math
from typing import Any

from reader.tfdata.dataset_info import load_manifest, open_dataset


def steps_per_epoch(data_dir: str, split: str, batch_size: int, *,
                    drop_remainder: bool = False, num_workers: int = 1) -> int:
    """Batches one worker gets per epoch, from the manifest's record count.

    With ``num_workers`` input pipelines each sees about ``1 / num_workers`` of the
    records (exactly so when records, not files, are sharded).
    """
    records = open_dataset(data_dir, splits=[split]).num_records(split)
    per_worker = records / num_workers
    return int(per_worker // batch_size) if drop_remainder else math.ceil(
        per_worker / batch_size)


def label_vocabulary(data_dir: str) -> list[str]:
    """Label names in id order (``label_vocabulary(d)[label_id]``): ``sorted()`` by name
    (as Keras and torchvision number classes), or by decreasing train frequency where
    the dataset was built with ``--class_order=frequency``
    (``manifest["preprocessing"]["labels"]["class_order"]``; docs/LABELS.md)."""
    return list(load_manifest(data_dir)["label_vocab"])


def transform_output(data_dir: str) -> Any:
    """``tft.TFTransformOutput`` of the dataset, for serving-time preprocessing.

    ``transform_output(d).transform_features_layer()`` inside a Keras serving
    function applies exactly the preprocessing that produced the stored examples.

    Raises:
        FileNotFoundError: no manifest (the job did not finish).
        ImportError: tensorflow-transform is not installed (it is optional).
    """
    load_manifest(data_dir)  # Refuse unfinished directories.
    try:
        # Imported on demand: only serving needs it, and a training install lacks it.
        import tensorflow_transform as tft
    except ImportError:
        raise ImportError(
            "reader.transform_output needs tensorflow-transform, which a training "
            "install does not include: pip install 'tensorflow-transform>=1.21,<1.22'"
        ) from None
    return tft.TFTransformOutput(data_dir)
