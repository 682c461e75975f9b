"""Duplicate images across a dataset's splits, found in Beam from the signatures the
shard step took in each image's one decode; the report, and what ``drop`` removes.

``FindDuplicates`` gets each shard's ``ShardFacts`` (its written images' keys,
labels and signatures, in record order) and, on ``--append``, the signatures earlier
versions kept beside their key indexes (``keys/hashes-vNNNNN.jsonl``), so new images
are checked against the whole dataset without reading an old one. Only signatures
cross its stages, gathered into a few buckets (``etl.images.duplicate_buckets``):
images are grouped by pixel hash, near pairs found by perceptual-hash bands
(``etl.images.duplicate_groups``), and with ``drop`` each
removed image becomes a ``Removal`` of its shard's record position
(``etl.core.record_removal``) and a ``cross_split_duplicate`` dead letter. It writes
``duplicates/summary.json``, ``duplicates/pairs.jsonl`` and this version's hashes
file, and returns the manifest's ``duplicates`` entry (the summary).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable
from typing import Any

import apache_beam as beam

from etl.core import dead_letters, record_removal, storage, versions
from etl.core.dead_letters import Rejection
from etl.images import duplicate_buckets as buckets
from etl.images import duplicate_groups
from etl.images.duplicate_groups import Member, NearEdge, Pair
from reader import contract

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
              removed: list[duplicate_groups.Removal], settings: DuplicateSettings,
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
        "removed": {split: sum(r.member.split == split for r in removed)
                    for split in contract.SPLITS},
        "versions_without_hashes": without_hashes,
        "report": contract.DUPLICATE_PAIRS_RELPATH,
    }


def _write_report(searched: int, *, appends: bool, output_dir: str,
                  settings: DuplicateSettings,
                  multi_label: bool, pairs: list[Pair], counts: list[tuple[int, ...]],
                  capped: list[tuple[int, int, int]],
                  removed: list[duplicate_groups.Removal],
                  without_hashes: list[int]) -> dict[str, Any]:
    ordered = sorted(pairs, key=Pair.sort_key)
    summary = summarise(ordered, counts[0] if counts else (0,) * 5, capped, removed,
                        settings, without_hashes)
    if appends and not searched:
        # An append that brought no new image leaves the report as it is.
        return {"duplicates": summary}
    storage.write_text(storage.join(output_dir, contract.DUPLICATE_PAIRS_RELPATH), "".join(
        json.dumps(pair.to_json_fields(multi_label), ensure_ascii=False) + "\n"
        for pair in ordered))
    storage.write_text(storage.join(output_dir, contract.DUPLICATES_SUMMARY_RELPATH),
                       json.dumps(summary, indent=1) + "\n")
    return {"duplicates": summary}


def _write_hashes(lines: list[tuple[str, str]], *, path: str, removed: list[str]) -> int:
    """Writes this version's hashes file (none when it stores no image); returns how
    many new images were searched (stored or removed)."""
    gone = set(removed)
    kept = [line for key, line in sorted(lines) if key not in gone]
    if kept:
        storage.write_text(path, "".join(kept))
    return len(lines)


def _sum_counts(counts: Iterable[tuple[int, ...]]) -> tuple[int, ...]:
    return tuple(sum(column) for column in zip(*counts, strict=True)) or (0,) * 5


class FindDuplicates(beam.PTransform):
    """``ShardFacts`` of the written images → ``(removals, rejections, entry)``:
    the ``record_removal.Removal``s of each shard that loses images (none unless
    ``drop``), their dead letters, and a single element, the manifest's
    ``duplicates`` entry, once the report and this version's hashes are written."""

    def __init__(self, output_dir: str, settings: DuplicateSettings,
                 version: versions.DatasetVersion, multi_label: bool) -> None:
        super().__init__()
        self._output_dir = output_dir
        self._settings = settings
        self._multi_label = multi_label
        self._hashes_path = storage.join(output_dir, versions.hashes_relpath(version.number))
        self._appends = version.appends
        history = (version.previous or {}).get("history", [])
        earlier = [versions.hashes_relpath(entry["version"]) for entry in history]
        self._published = [relpath for relpath in earlier
                           if storage.exists(storage.join(output_dir, relpath))]
        self._without_hashes = [entry["version"] for entry, relpath in zip(
            history, earlier, strict=True) if relpath not in self._published]

    def expand(self, facts: beam.PCollection) -> tuple[beam.PCollection, ...]:
        pipeline = facts.pipeline
        published = (pipeline
                     | "PublishedHashFiles" >> beam.Create(self._published)
                     | "PublishedBuckets" >> beam.FlatMap(
                         buckets.published_buckets, output_dir=self._output_dir))
        # {pixel hash: [rows]}: every exact group, in 16 buckets
        exact = (
            (facts | "ShardBuckets" >> beam.FlatMap(
                buckets.shard_buckets, keep_sources=self._settings.mode == DROP),
             published)
            | "AllBuckets" >> beam.Flatten()
            | "GroupByPixels" >> beam.GroupByKey()
            | "ExactBuckets" >> beam.MapTuple(buckets.merged)
        )
        near, capped = self._near_edges(exact)
        if self._settings.mode == DROP:
            removed = exact | "ChooseRemovals" >> beam.FlatMap(
                buckets.removals, near=beam.pvalue.AsList(near))
        else:
            removed = pipeline | "NoRemovals" >> beam.Create([])
        removals = (removed
                    | "KeyByShard" >> beam.Map(
                        lambda r: ((r.member.split, r.member.shard), r.member))
                    | "GroupByShard" >> beam.GroupByKey()
                    | "ShardRemovals" >> beam.Map(_shard_removal))
        rejections = removed | "DeadLetters" >> beam.Map(_rejection)
        entry = self._report(exact, near, capped, removed)
        return removals, rejections, entry

    def _near_edges(self, exact: beam.PCollection
                    ) -> tuple[beam.PCollection, beam.PCollection]:
        """``(NearEdge``s, each once; ``(band, value, size)`` of the capped buckets)."""
        settings = self._settings
        compared = (
            exact
            | "BandValues" >> beam.FlatMap(
                buckets.band_entries,
                edges=duplicate_groups.band_edges(settings.near_distance))
            | "GroupByBand" >> beam.CombinePerKey(buckets.MergeLists())
            | "CompareBuckets" >> beam.FlatMap(
                buckets.compare_bands, near_distance=settings.near_distance,
                cap=settings.bucket_cap,
            ).with_outputs(buckets.CAPPED, main="edges")
        )
        edges = compared.edges | "OneEdgeEach" >> beam.Distinct()
        near = (
            exact
            | "EdgeEnds" >> beam.FlatMap(buckets.edge_ends,
                                         edges=beam.pvalue.AsList(edges))
            | "GroupEdgeEnds" >> beam.GroupByKey()
            | "NearEdges" >> beam.MapTuple(buckets.near_edge)
        )
        return near, compared[buckets.CAPPED]

    def _report(self, exact: beam.PCollection, near: beam.PCollection,
                capped: beam.PCollection, removed: beam.PCollection) -> beam.PCollection:
        """Writes this version's hashes, then the report; its manifest entry."""
        pairs = ((exact | "ExactPairs" >> beam.FlatMap(buckets.exact_pairs),
                  near | "NearPairs" >> beam.Map(NearEdge.pair))
                 | "AllPairs" >> beam.Flatten())
        counts = (exact
                  | "GroupCounts" >> beam.Map(buckets.counts)
                  | "SumCounts" >> beam.CombineGlobally(_sum_counts))
        return (
            exact
            | "HashesLines" >> beam.FlatMap(buckets.hashes_lines)
            | "GatherHashes" >> beam.combiners.ToList()
            | "WriteHashes" >> beam.Map(_write_hashes, path=self._hashes_path,
                                        removed=beam.pvalue.AsList(
                                            removed | "RemovedKeys" >> beam.Map(
                                                lambda r: r.member.key)))
            | "WriteReport" >> beam.Map(
                _write_report, appends=self._appends, output_dir=self._output_dir,
                settings=self._settings,
                multi_label=self._multi_label, pairs=beam.pvalue.AsList(pairs),
                counts=beam.pvalue.AsList(counts), capped=beam.pvalue.AsList(capped),
                removed=beam.pvalue.AsList(removed), without_hashes=self._without_hashes))
