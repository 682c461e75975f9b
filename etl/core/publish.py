"""The publishing tail every job ends with: plan shards, write them, dead letters, manifest.

A job hands ``PublishDataset`` small *units* (image records, window runs: anything
with a ``split`` and a ``key``), a plan (units → ``(split, num_shards)``) and its
fused shard writer (a DoFn from ``((split, shard), [unit])`` to the shard's pending
file, emitting one shard result and tagged ``Rejection``s). The tail places each
unit in shard ``stable_hash64(key, "shard") % num_shards`` of its split, runs the
writer once per shard, renames the written shards to their final names, writes
every dead letter and, last, the manifest, which the job's check may withhold.
Only units, plans and results cross its stage boundaries.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import apache_beam as beam

from etl.core import dead_letters, sharding
from etl.core.manifest import ManifestCheck, TransformDescriber, WriteManifest


@dataclasses.dataclass(frozen=True)
class ManifestSpec:
    """What the manifest says about the job, besides what the tail measures."""

    kind: str
    task: str
    preprocessing: Mapping[str, Any]
    check: ManifestCheck | None = None
    describe_transform: TransformDescriber | None = None


def _label_counts(result: dict[str, Any]) -> Iterator[tuple[tuple[str, str], int]]:
    for label, count in result.get("label_counts", ()):
        yield (result["split"], label), count


class PublishDataset(beam.PTransform):
    """Units → shards, ``errors/rejected.jsonl`` and ``manifest.json`` under
    ``output_dir``.

    Args:
        output_dir: the dataset directory.
        name: dataset name, the shard file prefix.
        plan: PTransform from the units to ``(split, num_shards)``.
        write_shard: the job's fused shard writer (see the module docstring); called
            with side inputs ``num_shards`` (dict) and ``transform_written``.
        write_label: the writer step's label.
        rejected: the job's earlier ``Rejection`` PCollections.
        transform_written: what ``WriteTransformFn`` returns; the writer and the
            manifest wait for it.
        extras: single-element PCollections of extra manifest entries (dicts).
        manifest: the job's kind, task, preprocessing, check and describer.

    Returns:
        A single-element PCollection holding the manifest's path.
    """

    def __init__(self, output_dir: str, name: str, *, plan: beam.PTransform,
                 write_shard: beam.DoFn, write_label: str,
                 rejected: Sequence[beam.PCollection], transform_written: beam.PCollection,
                 extras: Sequence[beam.PCollection], manifest: ManifestSpec) -> None:
        super().__init__()
        self._output_dir = output_dir
        self._name = name
        self._plan = plan
        self._write_shard = write_shard
        self._write_label = write_label
        self._rejected = tuple(rejected)
        self._transform_written = transform_written
        self._extras = tuple(extras)
        self._manifest = manifest

    def expand(self, units: beam.PCollection) -> beam.PCollection:
        # (split, num_shards) for every split with units.
        num_shards = units | "PlanShards" >> self._plan
        shards, results, write_rejected = units | "WriteShards" >> sharding.WriteShardGroups(
            self._output_dir, self._name, num_shards=num_shards,
            write_shard=self._write_shard, write_label=self._write_label,
            side_inputs={"transform_written": beam.pvalue.AsList(self._transform_written)})
        label_counts = (
            results
            | "LabelCounts" >> beam.FlatMap(_label_counts)
            | "SumLabelCounts" >> beam.CombinePerKey(sum)
        )
        rejected_summary = (
            (*self._rejected, write_rejected)
            | "FlattenRejections" >> beam.Flatten()
            | "WriteRejections" >> dead_letters.WriteRejections(self._output_dir)
        )
        spec = self._manifest
        return units.pipeline | "WriteManifest" >> WriteManifest(
            self._output_dir, self._name, spec.preprocessing, kind=spec.kind,
            task=spec.task, shards=shards, label_counts=label_counts,
            rejected=rejected_summary, transform_written=self._transform_written,
            extras=self._extras, check=spec.check,
            describe_transform=spec.describe_transform)
