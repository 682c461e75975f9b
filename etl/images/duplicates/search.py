"""Duplicate images across a dataset's splits, found in Beam from the signatures the
shard step took in each image's one decode; the report, and what ``drop`` removes.

``FindDuplicates`` gets each shard's ``ShardFacts`` (its written images' keys,
labels and signatures, in record order) and, on ``--append``, the signatures earlier
versions kept beside their key indexes (``keys/hashes-vNNNNN.jsonl``), so new images
are checked against the whole dataset without reading an old one. Only signatures
cross its stages, gathered into a few buckets (``etl.images.duplicates.buckets``):
images are grouped by pixel hash, near pairs found by perceptual-hash bands
(``etl.images.duplicates.groups``), and with ``drop`` each removed image becomes a
``Removal`` of its shard's record position (``etl.core.shards.removal``) and a
``cross_split_duplicate`` dead letter. The report's parts are gathered into one
element, which writes ``duplicates/summary.json``, ``duplicates/pairs.jsonl`` and
this version's hashes file and becomes the manifest's ``duplicates`` entry.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable
from typing import Any

import apache_beam as beam

from etl.core import dead_letters
from etl.core.dead_letters import Rejection
from etl.core.io import storage
from etl.core.run import versions
from etl.core.shards import removal as record_removal
from etl.images.duplicates import buckets
from etl.images.duplicates import groups as duplicate_groups
from etl.images.duplicates.groups import Member, Pair
from reader.format import contract

OFF, REPORT, DROP = "off", "report", "drop"
MODES = (REPORT, DROP, OFF)


@dataclasses.dataclass(frozen=True)
class DuplicateSettings:
    """``--cross_split_duplicates`` and the near-duplicate distance."""

    mode: str = REPORT
    near_distance: int = duplicate_groups.DEFAULT_NEAR_DISTANCE
    bucket_cap: int = duplicate_groups.DEFAULT_BUCKET_CAP

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"--cross_split_duplicates must be one of {MODES}, got "
                             f"{self.mode!r}.")
        duplicate_groups.band_edges(self.near_distance)  # checks the distance
        if self.bucket_cap < 2:
            raise ValueError(f"The bucket cap must be at least 2, got {self.bucket_cap}.")

    @property
    def enabled(self) -> bool:
        return self.mode != OFF

    def describe(self) -> dict[str, Any]:
        return {"cross_split_duplicates": self.mode,
                "near_duplicate_distance": self.near_distance if self.enabled else None}


# The default: report, at the default distance.
REPORT_DUPLICATES = DuplicateSettings()


def _rejection(removal: duplicate_groups.Removal) -> Rejection:
    member, partner = removal.member, removal.partner
    how = (f"near duplicate, {removal.distance} of 64 hash bits apart"
           if removal.kind == duplicate_groups.NEAR else f"same {removal.kind}")
    kept = "an earlier version's" if partner.published else f"the {partner.split}"
    return Rejection(
        key=member.key, source=member.source, reason=dead_letters.CROSS_SPLIT_DUPLICATE,
        message=f"duplicate_of:{partner.key} ({how}); {kept} copy is kept "
                f"(--cross_split_duplicates=drop).",
        split=member.split, duplicate_of=partner.key)


def _shard_removal(element: tuple[tuple[str, int], Iterable[Member]]
                   ) -> record_removal.Removal:
    (split, shard), members = element
    ordered = sorted(members, key=lambda m: m.position)
    return record_removal.Removal(split, shard, tuple(m.position for m in ordered),
                                  tuple(label for m in ordered for label in m.labels))


def summarise(pairs: list[Pair], counts: tuple[int, ...], capped: list[tuple[int, int, int]],
              removed_splits: list[str], settings: DuplicateSettings,
              without_hashes: list[int]) -> dict[str, Any]:
    """The report's summary (and the manifest's ``duplicates`` entry)."""
    images, blank, groups, grouped, crossing = counts
    by_kind: dict[str, dict[str, int]] = {kind: {} for kind in duplicate_groups.KINDS}
    disagree = dict.fromkeys(duplicate_groups.KINDS, 0)
    for pair in pairs:
        split_pair = pair.split_pair()
        by_kind[pair.kind][split_pair] = by_kind[pair.kind].get(split_pair, 0) + 1
        disagree[pair.kind] += pair.labels_disagree()
    order = [f"{a}-{b}" for i, a in enumerate(contract.SPLITS) for b in contract.SPLITS[i:]]
    return {
        "mode": settings.mode,
        "near_distance": settings.near_distance,
        "bucket_cap": settings.bucket_cap,
        "images": images,
        "blank_images": blank,
        "pairs": {kind: {name: by_kind[kind].get(name, 0) for name in order}
                  for kind in duplicate_groups.KINDS},
        "cross_split_pairs": sum(p.crosses_splits() for p in pairs),
        "label_disagreements": disagree,
        "exact_groups": {"groups": groups, "images": grouped, "cross_split": crossing},
        "capped_buckets": {"buckets": len(capped), "hashes": sum(n for *_, n in capped)},
        "removed": {split: removed_splits.count(split) for split in contract.SPLITS},
        "versions_without_hashes": without_hashes,
        "report": contract.DUPLICATE_PAIRS_RELPATH,
    }


@dataclasses.dataclass(frozen=True)
class _Report:
    """Where the report goes and what it is of."""

    output_dir: str
    hashes_path: str
    appends: bool
    settings: DuplicateSettings
    multi_label: bool
    without_hashes: list[int]

    def write(self, parts: list[tuple[str, Any]]) -> dict[str, Any]:
        """Writes this version's hashes file and the report from their parts
        (``duplicate_buckets``' tagged values); returns the manifest's entry. An
        append that brought no new image leaves the report as it is."""
        by_tag: dict[str, list[Any]] = {tag: [] for tag in (
            buckets.BUCKET_PART, buckets.NEAR_PART, buckets.CAPPED_PART,
            buckets.REMOVED_PART)}
        for tag, value in parts:
            by_tag[tag].append(value)
        removed = dict(by_tag[buckets.REMOVED_PART])
        counts = [counts for counts, *_ in by_tag[buckets.BUCKET_PART]]
        lines = buckets.hashes_lines(by_tag[buckets.BUCKET_PART])
        edges = [edge for edges in by_tag[buckets.NEAR_PART] for edge in edges]
        pairs = sorted([Pair.from_row(row) for _, rows, *_ in by_tag[buckets.BUCKET_PART]
                        for row in rows]
                       + [edge.pair() for edge in buckets.near_edges(edges, dict(lines))],
                       key=Pair.sort_key)
        capped = sorted(bucket for found in by_tag[buckets.CAPPED_PART] for bucket in found)
        summary = summarise(pairs, _sum_counts(counts), capped,
                            sorted(removed.values()), self.settings, self.without_hashes)
        kept = [line for key, line in lines if key not in removed]
        if kept:
            storage.write_text(self.hashes_path, "".join(kept))
        if self.appends and not lines:
            return {"duplicates": summary}
        storage.write_text(storage.join(self.output_dir, contract.DUPLICATE_PAIRS_RELPATH),
                           "".join(duplicate_groups.json_line(
                               pair.to_json_fields(self.multi_label)) for pair in pairs))
        storage.write_text(storage.join(self.output_dir, contract.DUPLICATES_SUMMARY_RELPATH),
                           json.dumps(summary, indent=1) + "\n")
        return {"duplicates": summary}


def _sum_counts(counts: Iterable[tuple[int, ...]]) -> tuple[int, ...]:
    return tuple(sum(column) for column in zip(*counts, strict=True)) or (0,) * 5


class FindDuplicates(beam.PTransform):
    """``ShardFacts`` of the written images → ``(removals, rejections, entry)``:
    with ``drop``, the ``record_removal.Removal``s of each shard that loses images
    and their dead letters (else None: nothing to take out); and a single element,
    the manifest's ``duplicates`` entry, once the report and this version's hashes
    are written."""

    def __init__(self, output_dir: str, settings: DuplicateSettings,
                 version: versions.DatasetVersion, multi_label: bool) -> None:
        super().__init__()
        self._output_dir = output_dir
        self._settings = settings
        history = (version.previous or {}).get("history", [])
        earlier = [versions.hashes_relpath(entry["version"]) for entry in history]
        self._published = [relpath for relpath in earlier
                           if storage.exists(storage.join(output_dir, relpath))]
        self._report = _Report(
            output_dir, storage.join(output_dir, versions.hashes_relpath(version.number)),
            version.appends, settings, multi_label,
            [entry["version"] for entry, relpath in zip(history, earlier, strict=True)
             if relpath not in self._published])

    def expand(self, facts: beam.PCollection) -> tuple[beam.PCollection, ...]:
        pipeline = facts.pipeline
        settings = self._settings
        shard_buckets = facts | "ShardBuckets" >> beam.FlatMap(
            buckets.shard_buckets, keep_sources=settings.mode == DROP)
        if self._published:  # only on --append: a Flatten costs the local runner a stage
            published = (pipeline
                         | "PublishedHashFiles" >> beam.Create(self._published)
                         | "PublishedBuckets" >> beam.FlatMap(
                             buckets.published_buckets, output_dir=self._output_dir))
            shard_buckets = (shard_buckets, published) | "AllBuckets" >> beam.Flatten()
        edges = duplicate_groups.band_edges(settings.near_distance)
        searched = (
            shard_buckets
            | "GroupByPixels" >> beam.GroupByKey()
            | "SearchBuckets" >> beam.FlatMap(
                buckets.search_bucket, edges=edges, keep_groups=settings.mode == DROP,
            ).with_outputs(buckets.BANDS, buckets.EXACT, main="parts"))
        # The report's parts of the near pairs: NEAR_PART and CAPPED_PART.
        compared = (
            searched[buckets.BANDS]
            | "GroupByBand" >> beam.GroupByKey()
            | "CompareBands" >> beam.FlatMap(
                buckets.compare_bands, edges=edges, near_distance=settings.near_distance,
                cap=settings.bucket_cap))
        parts = [
            searched.parts,
            compared,
            # An empty bucket, so that a search of no image still writes its report.
            # Typed like the other parts: Flink's and Spark's runners union a
            # Flatten's inputs only when their coders match (apache/beam#19365).
            pipeline | "NoImages" >> beam.Create([buckets.EMPTY_PART]).with_output_types(
                Any)]
        removals = rejections = None
        if settings.mode == DROP:
            removals, rejections, removed = self._removals(searched, compared)
            parts.append(removed)
        entry = (
            parts
            | "ReportParts" >> beam.Flatten()
            # Without defaults: a default is a side input, which the local runner
            # sizes object by object (seconds for the hashes lines of 20,000 images).
            | "GatherReport" >> beam.CombineGlobally(
                beam.combiners.ToListCombineFn()).without_defaults()
            | "WriteReport" >> beam.Map(self._report.write))
        return removals, rejections, entry

    @staticmethod
    def _removals(searched: beam.pvalue.DoOutputsTuple, compared: beam.PCollection
                  ) -> tuple[beam.PCollection, ...]:
        """drop's ``(removals, rejections, report parts)``: the near edges joined to the
        exact buckets they touch, each bucket's removed images."""
        removed = (
            {buckets.GROUPS: searched[buckets.EXACT],
             buckets.NEAR: (compared
                            | "Edges" >> beam.FlatMap(buckets.part_edges)
                            | "EdgeBuckets" >> beam.FlatMap(buckets.edge_buckets))}
            | "JoinEdges" >> beam.CoGroupByKey()
            | "ChooseRemovals" >> beam.FlatMap(buckets.removals))
        removals = (removed
                    | "KeyByShard" >> beam.Map(
                        lambda r: ((r.member.split, r.member.shard), r.member))
                    | "GroupByShard" >> beam.GroupByKey()
                    | "ShardRemovals" >> beam.Map(_shard_removal))
        rejections = removed | "DeadLetters" >> beam.Map(_rejection)
        parts = removed | "RemovedParts" >> beam.Map(
            lambda r: (buckets.REMOVED_PART, (r.member.key, r.member.split)))
        return removals, rejections, parts
