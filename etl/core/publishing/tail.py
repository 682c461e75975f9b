"""The publishing tail every job ends with: plan shards, write them, dead letters, manifest.

A job hands ``PublishDataset`` small *units* (image records, window runs: anything
with a ``split`` and a ``key``), a plan (units → ``(split, num_shards)``) and its
fused shard writer (a DoFn from ``((split, shard), [unit])`` to the shard's pending
file, emitting one shard result and tagged ``Rejection``s). The tail places each
unit in shard ``stable_hash64(key, "shard") % num_shards`` of its split, decides
whether the run resumes an interrupted one (``etl.core.run.resume``), runs the writer
once per shard (keeping the shards a resumed run finished), lets the job's
``screen`` take records back out of the written shards from what the writers
reported about them (``etl.core.shards.removal``), renames the written shards to
their final names, writes every dead letter and, last, the manifest, which the
job's check may withhold.
Only units, plans and results cross its stage boundaries.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import apache_beam as beam

from etl.core.publishing import dead_letters
from etl.core.publishing.manifest import ManifestSpec, WriteManifest
from etl.core.run import fingerprint, resume, versions
from etl.core.shards import placement as sharding
from etl.core.shards import removal as record_removal
from etl.core.stats import step as describe
from reader.format import contract

__all__ = ["ManifestSpec", "PublishDataset"]


def _label_counts(result: sharding.ShardResult) -> Iterator[tuple[tuple[str, str], int]]:
    for label, count in result.label_counts:
        yield (result.split, label), count


def _job_identity(name: str, spec: ManifestSpec, inputs: Mapping[str, Any] | None,
                  version: versions.DatasetVersion) -> dict[str, Any]:
    """What of the job shapes its shards, for the resume fingerprint. The error
    threshold only decides whether the finished shards are published, so a rerun
    with another one keeps them."""
    preprocessing = {key: value for key, value in spec.preprocessing.items()
                     if key != "max_error_fraction"}
    return {"name": name, "kind": spec.kind, "task": spec.task,
            "preprocessing": preprocessing, "inputs": dict(inputs or {}),
            "dataset_version": version.number}


class PublishDataset(beam.PTransform):
    """Units → shards, ``errors/rejected.jsonl`` and ``manifest.json`` under
    ``output_dir``.

    Args:
        output_dir: the dataset directory.
        name: dataset name, the shard file prefix.
        plan: PTransform from the units to ``(split, num_shards)``
            (``etl.core.shards.plan.PlanShards``).
        write_shard: the job's fused shard writer (an ``etl.core.shards.step.ShardStep``);
            called with side inputs ``num_shards`` (dict) and ``transform_dir``.
        write_label: the writer step's label.
        rejected: the job's earlier ``Rejection`` PCollections.
        transform_dir: a single-element PCollection, the folder TensorFlow loads
            the transform output from (``etl.core.transform.analysis``); the writer and the
            manifest wait for it.
        extras: single-element PCollections of extra manifest entries (dicts).
        manifest: the job's kind, task, preprocessing, check and describer.
        inputs: what identifies the job's input beyond its units, for the resume
            fingerprint (e.g. the time series' files with their sizes and mtimes).
        screen: optional PTransform from the writers' facts (``ShardFacts``) to
            ``(removals, rejections, entry)``: the ``record_removal.Removal``s to
            take out of the written shards before they are renamed and their
            ``Rejection``s (both None when it takes nothing out), and a
            single-element extra manifest entry (the image job's
            ``etl.images.duplicates.search.FindDuplicates``).
        describe: optional PTransform from ``{"facts": ..., "removals": ...}`` (the
            writers' ``ShardFacts``; the screen's removals, where it removes) to a single-element
            extra manifest entry: the statistics of what was written (the image
            job's ``etl.images.stats.DescribeImages``).
        report: write ``report/index.html`` once the manifest is published
            (``reader.report``).

    Returns:
        A single-element PCollection holding the manifest's path.
    """

    def __init__(self, output_dir: str, name: str, *, plan: beam.PTransform,
                 write_shard: beam.DoFn, write_label: str,
                 rejected: Sequence[beam.PCollection], transform_dir: beam.PCollection,
                 extras: Sequence[beam.PCollection], manifest: ManifestSpec,
                 inputs: Mapping[str, Any] | None = None,
                 version: versions.DatasetVersion = versions.FIRST_VERSION,
                 key_index: bool = False, screen: beam.PTransform | None = None,
                 describe: beam.PTransform | None = None, report: bool = False) -> None:
        super().__init__()
        self._plan = plan
        self._output_dir = output_dir
        self._name = name
        self._write_shard = write_shard
        self._write_label = write_label
        self._transform_dir = transform_dir
        self._identity = fingerprint.run_identity(
            _job_identity(name, manifest, inputs, version))
        self._version = version
        self._key_index = key_index
        # An append's run must never touch the shards already published.
        self._protected = version.published_shards()
        self._rejected = tuple(rejected)
        self._write_rejections = dead_letters.WriteRejections(
            output_dir, relpath=versions.rejected_relpath(version.number),
            write_empty=not version.appends)
        self._manifest = manifest
        self._extras = extras
        self._screen = screen
        self._describe = describe
        self._report = report

    def _screen_and_describe(self, results: beam.PCollection, facts: beam.PCollection
                             ) -> tuple[beam.PCollection, list[beam.PCollection],
                                        list[beam.PCollection]]:
        """The shard results after the screen's removals, its rejections, and the
        manifest's extras with the screen's and the description's entries."""
        extras = list(self._extras)
        screened: list[beam.PCollection] = []
        removals = None
        if self._screen is not None:
            removals, removed, entry = facts | "Screen" >> self._screen
            if removals is not None:
                results = results | "RemoveRecords" >> record_removal.RemoveRecords(
                    self._output_dir, self._write_shard.shard_format, removals)
                screened.append(removed)
            extras.append(entry)
        if self._describe is not None:
            described = {"facts": facts} if removals is None else {
                "facts": facts, "removals": removals}
            extras.append(described | "Describe" >> self._describe)
        return results, screened, extras

    def expand(self, units: beam.PCollection) -> beam.PCollection:
        # (split, num_shards), for every split with units
        num_shards = units | "PlanShards" >> self._plan
        # True when this run resumes an interrupted one; decided before any shard.
        resuming = ((units, num_shards)
                    | "StartOrResume" >> resume.StartOrResume(
                        self._output_dir, self._identity, self._protected))
        write_shards = sharding.WriteShardGroups(
            write_shard=self._write_shard,
            write_label=self._write_label,
            side_inputs={"transform_dir": beam.pvalue.AsSingleton(self._transform_dir),
                         "resuming": beam.pvalue.AsSingleton(resuming)})
        # ShardResult; Rejection; ShardFacts
        results, write_rejected, facts = (
            (units, num_shards) | "WriteShards" >> write_shards)
        results, screened, extras = self._screen_and_describe(results, facts)
        # ShardEntry
        shards = results | "FinalizeShards" >> sharding.FinalizeShards(
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
                describe.write_report, output_dir=self._output_dir)
        return manifest_path
