"""What a job hands the publishing tail: ``PublishSpec`` and the steps it plugs in.

The tail (``etl.core.publishing.tail.PublishDataset``) runs two optional steps of
the job's after the shards are written and before they are renamed: a ``Screen``,
which may take records back out of the written shards, and a ``StatisticsStep``,
which writes the statistics of what was written. Both are Beam ``PTransform``s;
the protocols below say what they take and give.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol, Required, TypedDict

import apache_beam as beam

from etl.core.publishing.manifest import ManifestSpec
from etl.core.run import versions

if TYPE_CHECKING:
    from etl.core.dead_letters import Rejection
    from etl.core.shards.removal import Removal
    from etl.core.shards.step import ShardFacts, ShardStep


class WrittenShards(TypedDict, total=False):
    """What the tail hands the statistics step: the writers' ``ShardFacts`` and,
    where the screen takes records out, its ``Removal``s, whose records the
    statistics leave out."""

    facts: Required[beam.PCollection[ShardFacts]]
    removals: beam.PCollection[Removal]


class Screen(Protocol):
    """A ``PTransform`` that takes records back out of the written shards, from what
    their writers reported about them (the image job's
    ``etl.images.duplicates.search.FindDuplicates``)."""

    def __rrshift__(self, label: str) -> beam.PTransform:
        """Beam's labelled application, ``"Screen" >> screen``."""

    def expand(self, facts: beam.PCollection[ShardFacts]
               ) -> tuple[beam.PCollection[Removal] | None,
                          beam.PCollection[Rejection] | None,
                          beam.PCollection[dict[str, Any]]]:
        """``ShardFacts`` → ``(removals, rejections, entry)``: the ``Removal``s to
        take out of the written shards and their ``Rejection``s (both None when it
        takes nothing out), and a single-element extra manifest entry."""


class StatisticsStep(Protocol):
    """A ``PTransform`` that writes the statistics of the published dataset (the
    image job's ``etl.images.stats.WriteImageStatistics``, the time-series job's
    ``etl.core.stats.step.WriteStatisticsOf``)."""

    def __rrshift__(self, label: str) -> beam.PTransform:
        """Beam's labelled application, ``"Statistics" >> statistics``."""

    def expand(self, written: WrittenShards) -> beam.PCollection[dict[str, Any]]:
        """What was written → a single-element extra manifest entry, the
        ``statistics`` entry."""


@dataclasses.dataclass(frozen=True)
class PublishSpec:
    """Everything a job hands ``PublishDataset`` besides its units.

    Attributes:
        output_dir: the dataset directory.
        name: dataset name, the shard file prefix.
        plan: PTransform from the units to ``(split, num_shards)``
            (``etl.core.shards.plan.PlanShards``).
        write_shard: the job's fused shard writer; called with side inputs
            ``transform_dir`` and ``resuming``.
        write_label: the writer step's label.
        rejected: the job's earlier ``Rejection`` PCollections.
        transform_dir: a single-element PCollection, the folder TensorFlow loads
            the transform output from (``etl.core.transform.analysis``); the writer
            and the manifest wait for it.
        extras: single-element PCollections of extra manifest entries (dicts).
        manifest: the job's kind, task, preprocessing and check.
        inputs: what identifies the job's input beyond its units, for the resume
            fingerprint (e.g. the time series' files with their sizes and mtimes).
        version: the dataset version the run publishes.
        key_index: write the version's key index (every unit's and rejection's key).
        screen: takes records back out of the written shards (``Screen``).
        statistics: writes the statistics and gives the manifest's ``statistics``
            entry (``StatisticsStep``).
        report: write ``report/index.html`` once the manifest is published
            (``reader.report``).
    """

    output_dir: str
    name: str
    plan: beam.PTransform
    write_shard: ShardStep
    write_label: str
    rejected: tuple[beam.PCollection[Rejection], ...]
    transform_dir: beam.PCollection[str]
    extras: tuple[beam.PCollection[dict[str, Any]], ...]
    manifest: ManifestSpec
    inputs: Mapping[str, Any] | None = None
    version: versions.DatasetVersion = versions.FIRST_VERSION
    key_index: bool = False
    screen: Screen | None = None
    statistics: StatisticsStep | None = None
    report: bool = False
