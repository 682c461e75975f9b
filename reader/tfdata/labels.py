"""The label ``make_dataset`` yields, from the manifest's task and targets.

============================  =============================================
dataset                       label of a batch of ``b`` examples
============================  =============================================
classification                ``int64 [b]`` class ids (``-1``: not in train)
multi-label                   ``float32 [b, num_classes]`` multi-hot
regression                    ``float32 [b, k]`` stored targets
classes and targets           ``{"label": <as above>, "target": float32 [b, k]}``
forecast (time series)        ``float32 [b, H, F]`` stored target rows
============================  =============================================
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import tensorflow as tf

from reader.format import contract
from reader.format.contract import CLASSIFICATION, FORECAST, MULTI_LABEL, REGRESSION
from reader.tfdata.dataset_info import DatasetInfo

LabelFn = Callable[[Mapping[str, Any]], Any]


def multi_hot(ids: tf.RaggedTensor, num_classes: int) -> tf.Tensor:
    """Ragged class ids ``[b, None]`` → ``float32 [b, num_classes]``, 1 where an id is
    in the example's set; ids ``-1`` (classes not in the train split) are ignored.

    >>> multi_hot(tf.ragged.constant([[0, 2], [], [-1, 1]], tf.int64), 3).numpy()
    array([[1., 0., 1.],
           [0., 0., 0.],
           [0., 1., 0.]], dtype=float32)
    """
    known = tf.ragged.boolean_mask(ids, ids >= 0)
    # (row, class id) of every 1; the job stores each id once per example, and the
    # max keeps a repeated one at 1 regardless.
    indices = tf.stack([known.value_rowids(), known.values], axis=1)
    hot = tf.tensor_scatter_nd_max(
        tf.zeros(tf.stack([known.nrows(), tf.constant(num_classes, tf.int64)]),
                 tf.float32),
        indices, tf.ones_like(known.values, tf.float32))
    hot.set_shape([ids.shape[0], num_classes])
    return hot


def _feature(name: str) -> LabelFn:
    def label_of(features: Mapping[str, Any]) -> Any:
        return features[name]

    return label_of


def _multi_hot_label(num_classes: int) -> LabelFn:
    def label_of(features: Mapping[str, Any]) -> tf.Tensor:
        return multi_hot(features[contract.LABEL_KEY], num_classes)

    return label_of


def label_fn(info: DatasetInfo) -> LabelFn:
    """The function from a parsed, decoded batch (``{feature: [b, ...]}``, var_len
    features ragged) to the label ``make_dataset`` yields for ``info``'s dataset.

    Raises:
        ValueError: a task this reader does not know.
    """
    task = info.task
    if task == FORECAST:
        return _feature(contract.TARGET_KEY)
    if task == CLASSIFICATION:
        classes: LabelFn | None = _feature(contract.LABEL_KEY)
    elif task == MULTI_LABEL:
        classes = _multi_hot_label(info.num_classes)
    elif task == REGRESSION:
        classes = None
    else:
        raise ValueError(f"{info.data_dir!r} has task {task!r}, which this reader "
                         f"version does not know.")
    if not info.target_columns:
        if classes is None:
            raise ValueError(f"{info.data_dir!r} is a regression dataset without "
                             f"target columns.")
        return classes
    targets = _feature(contract.TARGET_KEY)
    if classes is None:
        return targets

    def both(features: Mapping[str, Any]) -> dict[str, Any]:
        return {contract.LABEL_KEY: classes(features),
                contract.TARGET_KEY: targets(features)}

    return both


def balance_error(info: DatasetInfo) -> str | None:
    """Why ``balance=True`` cannot apply to ``info``'s dataset; None if it can."""
    if info.task == FORECAST:
        return "balance=True needs class labels; this is a forecasting dataset."
    if info.task == REGRESSION:
        return (f"balance=True needs class labels; {info.data_dir!r} is a regression "
                f"dataset (numeric targets {info.target_columns}, no class).")
    if info.task == MULTI_LABEL:
        return (f"balance=True cannot balance the multi-label dataset "
                f"{info.data_dir!r}: an image counts toward every class in its set, so "
                f"undersampling by class cannot equalise the class frequencies (dropping "
                f"an image of a common class also drops its rare ones). Weight the loss "
                f"per class instead, e.g. from DatasetInfo.label_counts(split).")
    return None
