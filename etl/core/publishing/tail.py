"""The publishing tail every job ends with: plan shards, write them, dead letters, manifest.

A job hands ``PublishDataset`` small *units* (image records, window runs: anything
with a ``split`` and a ``key``) and a ``PublishSpec`` (``etl.core.publishing.spec``):
a plan (units → ``(split, num_shards)``), its fused shard writer (a DoFn from
``((split, shard), [unit])`` to the shard's pending file, emitting one shard result
and tagged ``Rejection``s) and its optional screen and statistics steps. The tail
places each unit in shard ``stable_hash64(key, "shard") % num_shards`` of its split,
decides whether the run resumes an interrupted one (``etl.core.run.resume``), runs
the writer once per shard (keeping the shards a resumed run finished), lets the
job's screen take records back out of the written shards from what the writers
reported about them (``etl.core.shards.removal``), writes the statistics of what
stays, renames the written shards to their final names, writes every dead letter
and, last, the manifest, which the job's check may withhold.
Only units, plans and results cross its stage boundaries.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import apache_beam as beam

from etl.core import dead_letters
from etl.core.publishing.manifest import ManifestSpec, WriteManifest
from etl.core.publishing.spec import PublishSpec, WrittenShards
from etl.core.run import fingerprint, resume, versions
from etl.core.shards import placement
from etl.core.shards import removal as record_removal
from etl.core.stats import step as stats_step
from reader.format import contract

__all__ = ["ManifestSpec", "PublishDataset", "PublishSpec"]


def _label_counts(result: placement.ShardResult) -> Iterator[tuple[tuple[str, str], int]]:
    for label, count in result.label_counts:
        yield (result.split, label), count


def _job_identity(spec: PublishSpec) -> dict[str, Any]:
    """What of the job shapes its shards, for the resume fingerprint. The error
    threshold only decides whether the finished shards are published, so a rerun
    with another one keeps them."""
    manifest = spec.manifest
    preprocessing = {key: value for key, value in manifest.preprocessing.items()
                     if key != "max_error_fraction"}
    return {"name": spec.name, "kind": manifest.kind, "task": manifest.task,
            "preprocessing": preprocessing, "inputs": dict(spec.inputs or {}),
            "dataset_version": spec.version.number}


class PublishDataset(beam.PTransform):
    """Units → shards, ``errors/rejected.jsonl`` and ``manifest.json`` under
    ``spec.output_dir`` (and, with the spec's steps, the screen's and the statistics'
    files).

    Args:
        spec: what the job hands the tail (``PublishSpec``).

    Returns:
        A single-element PCollection holding the manifest's path.
    """

    def __init__(self, spec: PublishSpec) -> None:
        super().__init__()
        self._plan = spec.plan
        self._output_dir = spec.output_dir
        self._name = spec.name
        self._write_shard = spec.write_shard
        self._write_label = spec.write_label
        self._transform_dir = spec.transform_dir
        self._identity = fingerprint.run_identity(_job_identity(spec))
        self._version = spec.version
        self._key_index = spec.key_index
        # An append's run must never touch the shards already published.
        self._protected = spec.version.published_shards()
        self._rejected = tuple(spec.rejected)
        self._write_rejections = dead_letters.WriteRejections(
            spec.output_dir, relpath=versions.rejected_relpath(spec.version.number),
            write_empty=not spec.version.appends)
        self._manifest = spec.manifest
        self._extras = spec.extras
        self._screen = spec.screen
        self._statistics = spec.statistics
        self._report = spec.report

    def _screen_and_statistics(self, results: beam.PCollection, facts: beam.PCollection
                               ) -> tuple[beam.PCollection, list[beam.PCollection],
                                          list[beam.PCollection]]:
        """The shard results after the screen's removals, its rejections, and the
        manifest's extras with the screen's and the statistics' entries."""
        extras = list(self._extras)
        screened: list[beam.PCollection] = []
        written: WrittenShards = {"facts": facts}
        if self._screen is not None:
            removals, removed, entry = facts | "Screen" >> self._screen
            if removals is not None:
                results = results | "RemoveRecords" >> record_removal.RemoveRecords(
                    self._output_dir, self._write_shard.shard_format, removals)
                screened.append(removed)
                written["removals"] = removals
            extras.append(entry)
        if self._statistics is not None:
            extras.append(written | "Statistics" >> self._statistics)
        return results, screened, extras

    def expand(self, units: beam.PCollection) -> beam.PCollection:
        # (split, num_shards), for every split with units
        num_shards = units | "PlanShards" >> self._plan
        # True when this run resumes an interrupted one; decided before any shard.
        resuming = ((units, num_shards)
                    | "StartOrResume" >> resume.StartOrResume(
                        self._output_dir, self._identity, self._protected))
        write_shards = placement.WriteShardGroups(
            write_shard=self._write_shard,
            write_label=self._write_label,
            side_inputs={"transform_dir": beam.pvalue.AsSingleton(self._transform_dir),
                         "resuming": beam.pvalue.AsSingleton(resuming)})
        # ShardResult; Rejection; ShardFacts
        results, write_rejected, facts = (
            (units, num_shards) | "WriteShards" >> write_shards)
        results, screened, extras = self._screen_and_statistics(results, facts)
        # ShardEntry
        shards = results | "FinalizeShards" >> placement.FinalizeShards(
            self._output_dir, versions.shard_prefix(self._name, self._version.number),
            # The output flags' "compression" (OutputSettings.describe).
            contract.compression_of(self._manifest.preprocessing))
        # ((split, label_name), count)
        label_counts = (
            results
            | "LabelCounts" >> beam.FlatMap(_label_counts)
            | "SumLabelCounts" >> beam.CombinePerKey(sum)
        )
        # {"count", "by_reason", "examples"}
        rejections = ((*self._rejected, write_rejected, *screened)
                      | "FlattenRejections" >> beam.Flatten())
        rejected_summary = rejections | "WriteRejections" >> self._write_rejections
        keys_written = None
        if self._key_index:
            # The path of this version's key index (None: no key)
            keys_written = (
                (units | "UnitKeys" >> beam.Map(lambda unit: unit.key),
                 rejections | "RejectedKeys" >> beam.Map(lambda rejection: rejection.key))
                | "FlattenKeys" >> beam.Flatten()
                | "WriteKeyIndex" >> versions.WriteKeyIndex(self._output_dir,
                                                            self._version.number))
        write_manifest = WriteManifest(
            self._output_dir, self._name, self._manifest,
            transform_dir=self._transform_dir, keys_written=keys_written,
            extras=extras, version=self._version)
        # the manifest's path (None: an append that added nothing)
        manifest_path = ((shards, label_counts, rejected_summary)
                         | "WriteManifest" >> write_manifest)
        if self._report:
            _ = manifest_path | "WriteReport" >> beam.Map(
                stats_step.write_report, output_dir=self._output_dir)
        return manifest_path
