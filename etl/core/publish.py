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

from collections.abc import Iterator, Sequence

import apache_beam as beam

from etl.core import dead_letters, sharding
from etl.core.manifest import ManifestSpec, WriteManifest

__all__ = ["ManifestSpec", "PublishDataset"]


def _label_counts(result: sharding.ShardResult) -> Iterator[tuple[tuple[str, str], int]]:
    for label, count in result.label_counts:
        yield (result.split, label), count


class PublishDataset(beam.PTransform):
    """Units → shards, ``errors/rejected.jsonl`` and ``manifest.json`` under
    ``output_dir``.

    Args:
        output_dir: the dataset directory.
        name: dataset name, the shard file prefix.
        plan: PTransform from the units to ``(split, num_shards)``
            (``etl.core.shard_plan.PlanShards``).
        write_shard: the job's fused shard writer (an ``etl.core.shard_step.ShardStep``);
            called with side inputs ``num_shards`` (dict) and ``transform_written``.
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
        self._plan = plan
        self._write_shards = sharding.WriteShardGroups(
            output_dir, name, write_shard=write_shard, write_label=write_label,
            side_inputs={"transform_written": beam.pvalue.AsList(transform_written)})
        self._rejected = tuple(rejected)
        self._write_rejections = dead_letters.WriteRejections(output_dir)
        self._write_manifest = WriteManifest(output_dir, name, manifest,
                                             transform_written=transform_written,
                                             extras=extras)

    def expand(self, units: beam.PCollection) -> beam.PCollection:
        # (split, num_shards), for every split with units
        num_shards = units | "PlanShards" >> self._plan
        # ShardEntry; ShardResult; Rejection
        shards, results, write_rejected = (
            (units, num_shards) | "WriteShards" >> self._write_shards)
        # ((split, label_name), count)
        label_counts = (
            results
            | "LabelCounts" >> beam.FlatMap(_label_counts)
            | "SumLabelCounts" >> beam.CombinePerKey(sum)
        )
        # {"count", "by_reason", "examples"}
        rejected_summary = (
            (*self._rejected, write_rejected)
            | "FlattenRejections" >> beam.Flatten()
            | "WriteRejections" >> self._write_rejections
        )
        # the manifest's path
        return ((shards, label_counts, rejected_summary)
                | "WriteManifest" >> self._write_manifest)
