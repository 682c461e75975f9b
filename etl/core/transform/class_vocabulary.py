"""Class ids: the label vocabulary, fit on the train split, numbered by name or frequency.

``--class_order=name`` (the default) numbers the classes as Keras's
``image_dataset_from_directory`` and torchvision's ``ImageFolder`` do: Python's
``sorted()`` of the class names, which is Unicode code-point order (``"Z" < "a"``),
so data added to the same classes never renumbers them. ``--class_order=frequency``
is tf.Transform's own order (``tft.vocabulary``): decreasing train frequency, ties in
reverse byte order.

Either order is a vocabulary text file of the transform output, one name a line in id
order (``transform_fn/assets/label``): the exported ``transform_fn`` applies it at
serving time, and the manifest's ``label_vocab`` is read from it. Names tf.Transform
cannot write to that file (empty, or holding a line break) are left out of both.

Usage, inside a ``preprocessing_fn``::

    ids = class_vocabulary.apply_class_vocabulary(labels, order=NAME)
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import apache_beam as beam
import numpy as np
import tensorflow as tf
import tensorflow_transform as tft
import tensorflow_transform.beam as tft_beam
from tensorflow_transform import analyzers as tft_analyzers

from etl.core.io import storage
from reader.format import contract

NAME = contract.CLASS_ORDER_NAME
FREQUENCY = contract.CLASS_ORDER_FREQUENCY
_EMPTY_VOCABULARY_DUMMY = tft_analyzers.get_empy_vocabulary_dummy_value(tf.string)[1]


def sorted_class_names(totals: dict[bytes, float], min_total: float) -> list[bytes]:
    """The names (UTF-8) whose total weight reaches ``min_total`` in ``sorted()`` order
    of their text, without those a vocabulary text file cannot hold."""
    names = [name.decode("utf-8") for name, total in totals.items()
             if total >= min_total and name and b"\n" not in name and b"\r" not in name]
    return [name.encode("utf-8") for name in sorted(names)]


def _name_weights(batch: list[np.ndarray]) -> Iterator[tuple[bytes, float]]:
    names, weights = batch
    for name, weight in zip(names.reshape(-1), weights.reshape(-1), strict=True):
        yield bytes(name), float(weight)


class _SortedNamesFile(tft_beam.experimental.PTransformAnalyzer):
    """Analyzer body: batches ``([names], [weights])`` → the path of a text file of
    the names in ``sorted()`` order (``sorted_class_names``), one a line."""

    def __init__(self, min_total: float) -> None:
        super().__init__()
        self._min_total = min_total

    def expand(self, batches: beam.PCollection) -> beam.PCollection:
        return (
            batches
            | "NameWeights" >> beam.FlatMap(_name_weights)
            | "SumPerName" >> beam.CombinePerKey(sum)
            | "Gather" >> beam.combiners.ToDict()
            | "WriteSorted" >> beam.Map(self._write))

    def _write(self, totals: dict[bytes, float]) -> np.ndarray:
        path = storage.join(self.base_temp_dir, contract.LABEL_VOCABULARY_NAME)
        # As tft.vocabulary, an empty vocabulary holds one dummy name (TensorFlow
        # cannot build a lookup table from an empty file).
        names = sorted_class_names(totals, self._min_total) or [_EMPTY_VOCABULARY_DUMMY]
        storage.write_bytes(path, b"".join(name + b"\n" for name in names))
        return np.array(path.encode("utf-8"), dtype=object)


def _flat_values(labels: Any) -> tf.Tensor:
    return labels.values if isinstance(labels, tf.SparseTensor) else tf.reshape(labels, [-1])


def apply_class_vocabulary(labels: Any, *, order: str = NAME,
                           weights: tf.Tensor | None = None,
                           frequency_threshold: int | None = None) -> Any:
    """Class ids of ``labels`` (a ``[batch]`` string tensor, or a ``SparseTensor`` of
    label sets) by a vocabulary fit on what the analysis is fed (the train split).

    Args:
        labels: the class names.
        order: :data:`NAME`, or :data:`FREQUENCY` (module docstring).
        weights: optional ``[batch]`` weight of each dense label (its count).
        frequency_threshold: names whose total weight is below it get no id.

    Returns:
        ``labels``' ids, ``contract.UNKNOWN_LABEL_ID`` for a name not in the
        vocabulary; the vocabulary file is named ``contract.LABEL_VOCABULARY_NAME``.
    """
    if order == FREQUENCY:
        return tft.compute_and_apply_vocabulary(
            labels, vocab_filename=contract.LABEL_VOCABULARY_NAME,
            default_value=contract.UNKNOWN_LABEL_ID, weights=weights,
            frequency_threshold=frequency_threshold)
    names = _flat_values(labels)
    counts = (tf.ones_like(names, tf.float32) if weights is None
              else tf.reshape(tf.cast(weights, tf.float32), [-1]))
    # Each batch sends its distinct names and their summed weights, not every label.
    distinct, index = tf.unique(names)
    totals = tf.math.unsorted_segment_sum(counts, index, tf.size(distinct))
    (path,) = tft.experimental.ptransform_analyzer(
        [distinct, totals], _SortedNamesFile(float(frequency_threshold or 0)),
        [tf.string], [[]], output_asset_default_values=[b"TEMPORARY_ASSET_VALUE"],
        name="sorted_class_names")
    return tft.apply_vocabulary(labels, path, default_value=contract.UNKNOWN_LABEL_ID)
