"""Z-score normalisation by exact train statistics: the analyzer and the manifest entry.

A job sums its train values exactly (``etl/core/transform/exact_stats.py``) into a few
``Moments`` and hands them to tf.Transform serialized, one per analysis instance.
``exact_mean_and_std`` is the analyzer that merges them into the train mean and
standard deviation, ``normalise`` applies them in the graph, and
``SummariseMoments`` merges the same moments beside the analysis into the numbers
the manifest records. The sums are exact integers, so both sides get the same
``Moments`` whatever the merge order, and the same ``Moments.mean_and_std()`` turns
them into bit-identical float32: the manifest holds the statistics the
``transform_fn`` applies, not an approximation read back from it.

Usage::

    mean, std = zscore.exact_mean_and_std(inputs["train_moments"], num_columns=2)
    outputs["target"] = zscore.normalise(inputs["target"], mean, std)
    # beside the analysis: PCollection[Moments] → {"mean": [...], "std": [...]}
    entry = moments | "SummariseTargets" >> zscore.SummariseMoments(num_columns=2)
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import apache_beam as beam
import numpy as np
import tensorflow as tf
import tensorflow_transform as tft

from etl.core import singletons
from etl.core.transform import exact_stats


def _merge_batch(batch: list[np.ndarray], num_columns: int) -> exact_stats.Moments:
    return exact_stats.merge_all(
        (exact_stats.Moments.from_bytes(data) for data in batch[0]), num_columns)


def _emit_mean_and_std(moments: exact_stats.Moments) -> Iterator[Any]:
    mean, std = moments.mean_and_std()
    yield beam.pvalue.TaggedOutput("mean", mean)
    yield beam.pvalue.TaggedOutput("std", std)


@beam.ptransform_fn
def _ExactMeanAndStd(batches: beam.PCollection, num_columns: int
                     ) -> tuple[beam.PCollection, ...]:
    """Analyzer body: batches ``([serialized moments],)`` → mean ``[F]``, std ``[F]``."""
    outputs = (
        batches
        | "MergeBatch" >> beam.Map(_merge_batch, num_columns=num_columns)
        | "Sum" >> beam.CombineGlobally(exact_stats.MomentsCombineFn(num_columns))
        | "MeanAndStd" >> beam.FlatMap(_emit_mean_and_std).with_outputs("mean", "std"))
    return outputs.mean, outputs.std


def exact_mean_and_std(serialized_moments: tf.Tensor, num_columns: int,
                       name: str = "exact_mean_and_std") -> tuple[tf.Tensor, tf.Tensor]:
    """The train mean and population standard deviation per column: a tf.Transform
    analyzer over exact moments.

    Args:
        serialized_moments: ``[batch]`` string tensor of ``Moments.to_bytes()``, each
            of ``num_columns`` columns (the analysis instances' train moments).
        num_columns: columns of the values the moments sum.
        name: the analyzer's name scope (distinct per call in one graph).

    Returns:
        ``(mean, std)``, each ``[num_columns]`` float32: ``Moments.mean_and_std()`` of
        all moments merged (a column with no spread has std 0; see ``normalise``).
    """
    mean, std = tft.experimental.ptransform_analyzer(
        [serialized_moments], _ExactMeanAndStd(num_columns), [tf.float32, tf.float32],
        [[num_columns], [num_columns]], name=name)
    return mean, std


def normalise(values: tf.Tensor, mean: tf.Tensor, std: tf.Tensor) -> tf.Tensor:
    """``(values - mean) / std``, dividing by 1 where ``std`` is 0 (a constant column
    is only centred); ``mean`` and ``std`` broadcast against ``values``."""
    return (values - mean) / tf.where(std > 0, std, tf.ones_like(std))


def applied_mean_and_std(moments: exact_stats.Moments) -> tuple[list[float], list[float]]:
    """The mean and the divisor ``normalise`` applies with the analyzer's statistics.

    Returns:
        ``(mean, std)`` per column as Python floats holding float32 values exactly
        (``np.float32(float)`` gives back the graph's constant): ``mean_and_std()``,
        with a std of 0 replaced by the 1 the transform divides by.
    """
    mean, std = moments.mean_and_std()
    divisor = np.where(std > 0, std, np.float32(1)).astype(np.float32)
    return [float(m) for m in mean], [float(s) for s in divisor]


def _summary(moments: exact_stats.Moments) -> dict[str, list[float]]:
    mean, std = applied_mean_and_std(moments)
    return {"mean": mean, "std": std}


class SummariseMoments(beam.PTransform):
    """``Moments`` (each of ``num_columns`` columns) → one ``{"mean": [...],
    "std": [...]}``: what ``normalise`` applies with ``exact_mean_and_std`` over the
    same moments (see ``applied_mean_and_std``).

    An empty input gives mean 0 and std 1 per column (nothing to scale by).
    """

    def __init__(self, num_columns: int) -> None:
        super().__init__()
        self._num_columns = num_columns

    def expand(self, moments: beam.PCollection) -> beam.PCollection:
        return moments.pipeline | "MeanAndStd" >> singletons.Once(
            _summary, moments=singletons.combined(
                moments, "SumMoments", exact_stats.MomentsCombineFn(self._num_columns)))
