"""How many shards each split gets, decided on small units before any is transformed.

The shard step groups units by ``(split, shard)``, so the shard counts must be known
before a single example exists. ``PlanShards`` measures every unit (a tuple of
integers, its count first), sums the measures per split, and turns each split's sums
into a shard count: ``--num_shards`` if given, else the split's serialized bytes,
as the job estimates them from the sums, over the target shard size, never more
shards than units. A job parameterises the measure and the estimate.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

import apache_beam as beam

from etl.core.shards import placement

# A split's summed unit measures (and the job's estimates, by split) → its bytes.
SplitBytes = Callable[[str, tuple[int, ...], Mapping[str, Any]], int]
# (units, the summed measures as a dict side input) → (split, estimate) pairs.
Estimate = Callable[[beam.PCollection, Any], beam.PCollection]


def _measured(unit: Any, measure: Callable[[Any], tuple[int, ...]]
              ) -> tuple[str, tuple[int, ...]]:
    return unit.split, measure(unit)


def _sum_measures(measures: Iterable[tuple[int, ...]]) -> tuple[int, ...]:
    total: tuple[int, ...] = ()
    for measure in measures:
        if not total:
            total = measure
        elif measure:
            total = tuple(a + b for a, b in zip(total, measure, strict=True))
    return total


def _plan_split(element: tuple[str, tuple[int, ...]], split_bytes: SplitBytes,
                estimates: Mapping[str, Any], target_shard_bytes: int,
                num_shards: int | None) -> tuple[str, int]:
    split, sums = element
    if num_shards is not None:
        return split, placement.plan_num_shards(sums[0], 0, target_shard_bytes, num_shards)
    return split, placement.plan_num_shards(sums[0], split_bytes(split, sums, estimates),
                                           target_shard_bytes)


class PlanShards(beam.PTransform):
    """Units (anything with a ``split``) → ``(split, num_shards)`` for every split
    with units.

    Args:
        measure: a unit → its measures, a tuple of ints whose first is 1 (it is
            counted); summed per split.
        split_bytes: ``(split, summed measures, estimates)`` → the split's
            serialized bytes; not called with ``num_shards``.
        target_shard_bytes: the wanted shard size before compression.
        num_shards: the shard count of every split (``--num_shards``), or None.
        estimate: optional ``(units, summed measures side input)`` → PCollection of
            ``(split, estimate)``, given to ``split_bytes`` as ``estimates`` (e.g. a
            sample's mean size); not built with ``num_shards``.
    """

    def __init__(self, *, measure: Callable[[Any], tuple[int, ...]], split_bytes: SplitBytes,
                 target_shard_bytes: int, num_shards: int | None,
                 estimate: Estimate | None = None) -> None:
        super().__init__()
        placement.plan_num_shards(1, 1, target_shard_bytes, num_shards)  # Checks both.
        self._measure = measure
        self._estimate = estimate if num_shards is None else None
        self._split_bytes = split_bytes
        self._target_shard_bytes = target_shard_bytes
        self._num_shards = num_shards

    def expand(self, units: beam.PCollection) -> beam.PCollection:
        sums = (
            units
            # (split, measures of one unit)
            | "MeasureUnits" >> beam.Map(_measured, measure=self._measure)
            # (split, summed measures)
            | "SumPerSplit" >> beam.CombinePerKey(_sum_measures)
        )
        estimates: Any = {}
        if self._estimate is not None:
            # (split, estimate)
            estimates = beam.pvalue.AsDict(self._estimate(units, beam.pvalue.AsDict(sums)))
        # (split, num_shards)
        return sums | "PlanShardCounts" >> beam.Map(
            _plan_split, split_bytes=self._split_bytes, estimates=estimates,
            target_shard_bytes=self._target_shard_bytes, num_shards=self._num_shards)
