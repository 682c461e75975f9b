"""The manifest entries that describe an image dataset's targets and carried columns.

``targets`` records the exact statistics the transform applies: the mean and standard
deviation ``zscore.SummariseMoments`` computes from the very moments the analysis
merges (``TRAIN_TARGET_MOMENTS_KEY`` of the train instances), with the same exact
sums and the same rounding, so the manifest holds the numbers ``transform_fn``
normalises with, bit for bit, and users de-normalise predictions with them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import apache_beam as beam

from etl.core.transform import exact_stats, zscore
from etl.images.labels import LabelColumns
from etl.images.preprocessing import TRAIN_TARGET_MOMENTS_KEY
from reader.format.contract import CARRIED_COLUMNS_ENTRY, NO_NORMALIZATION, TARGETS_ENTRY, ZSCORE


def _moments(instance: Mapping[str, Any]) -> exact_stats.Moments:
    return exact_stats.Moments.from_bytes(instance[TRAIN_TARGET_MOMENTS_KEY])


def targets_entry(columns: LabelColumns, stats: Mapping[str, Any] | None = None
                  ) -> dict[str, Any]:
    """The manifest's ``targets`` entry: column names, normalisation and, with
    z-scores, the ``mean`` and ``std`` applied (``stats``)."""
    entry: dict[str, Any] = {
        "columns": list(columns.target_columns),
        "normalize": ZSCORE if columns.normalize_targets else NO_NORMALIZATION,
    }
    return {TARGETS_ENTRY: {**entry, **(stats or {})}}


class DescribeTargetsAndCarried(beam.PTransform):
    """Train analysis instances → the single-element PCollections of the manifest's
    ``targets`` and ``carried_columns`` entries (those the columns call for)."""

    def __init__(self, columns: LabelColumns) -> None:
        super().__init__()
        self._columns = columns

    def expand(self, train_instances: beam.PCollection) -> list[beam.PCollection]:
        columns = self._columns
        pipeline = train_instances.pipeline
        entries = []
        if columns.target_columns and columns.normalize_targets:
            entries.append(
                train_instances
                | "TargetMoments" >> beam.Map(_moments)
                | "TargetMeanAndStd" >> zscore.SummariseMoments(len(columns.target_columns))
                | "TargetsEntry" >> beam.Map(lambda stats: targets_entry(columns, stats)))
        elif columns.target_columns:
            entries.append(pipeline | "TargetsEntry" >> beam.Create([targets_entry(columns)]))
        if columns.carry_columns:
            entries.append(pipeline | "CarriedEntry" >> beam.Create(
                [{CARRIED_COLUMNS_ENTRY: list(columns.carry_columns)}]))
        return entries
