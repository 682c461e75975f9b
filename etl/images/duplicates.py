"""Duplicate images across a dataset's splits, found in Beam from the signatures the
shard step took in each image's one decode; the report, and what ``drop`` removes.

``FindDuplicates`` gets every written image's ``PlacedFacts`` (key, labels,
signatures, shard and position) and, on ``--append``, the signatures earlier
versions kept beside their key indexes (``keys/hashes-vNNNNN.jsonl``), so new images
are checked against the whole dataset without reading an old one. Only these small
records cross its stages: images are grouped by pixel hash, near pairs found by
perceptual-hash bands (``etl.images.duplicate_groups``), and with ``drop`` each
removed image becomes a ``Removal`` of its shard's record position
(``etl.core.record_removal``) and a ``cross_split_duplicate`` dead letter. It writes
``duplicates/summary.json``, ``duplicates/pairs.jsonl`` and this version's hashes
file, and returns the manifest's ``duplicates`` entry (the summary).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Iterator
from typing import Any

import apache_beam as beam

from etl.core import dead_letters, record_removal, storage, versions
from etl.core.dead_letters import Rejection
from etl.core.shard_step import PlacedFacts
from etl.images import duplicate_groups
from etl.images.duplicate_groups import Group, Member, NearEdge, Pair
from reader import contract

OFF, REPORT, DROP = "off", "report", "drop"
MODES = (REPORT, DROP, OFF)
# Tag of the buckets too large to compare.
_CAPPED = "capped"


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


# Between stages a member travels as ``Member.row()``, a tuple of plain values.
Row = tuple[Any, ...]
PIXELS_FIELD = 5


def _new_row(placed: PlacedFacts) -> Row:
    return duplicate_groups.member_of(placed.fields, placed.split, shard=placed.shard,
                                      position=placed.position).row()


def _published_rows(relpath: str, output_dir: str) -> Iterator[Row]:
    for line in storage.read_text(storage.join(output_dir, relpath)).splitlines():
        if line.strip():
            fields = json.loads(line)
            yield duplicate_groups.member_of(fields, fields["split"], published=True).row()


def _group(rows: Iterable[Row]) -> Group:
    return Group.of(Member.from_row(row) for row in rows)


def _band_entries(group: Group, edges: list[tuple[int, int]]
                  ) -> Iterator[tuple[tuple[int, int], tuple[Row, ...]]]:
    if not group.kept.blank:
        best = tuple(member.row() for member in group.best_per_split())
        for band in duplicate_groups.band_keys(group.kept.phash, edges):
            yield band, best


def _compare(bucket: tuple[tuple[int, int], Iterable[tuple[Row, ...]]],
             near_distance: int, cap: int) -> Iterator[Any]:
    (band, value), entries = bucket
    entries = list(entries)
    if len(entries) > cap:
        yield beam.pvalue.TaggedOutput(_CAPPED, (band, value, len(entries)))
        return
    # Rows by kept copy's key (the first field of its row), hashes from its row.
    entries.sort(key=lambda rows: rows[0][0])
    close = duplicate_groups.close_pairs([int(rows[0][6], 16) for rows in entries],
                                         near_distance)
    for i, j, distance in close:
        yield NearEdge(distance, tuple(map(Member.from_row, entries[i])),
                       tuple(map(Member.from_row, entries[j])))


def _neighbours(edge: NearEdge) -> Iterator[tuple[str, tuple[tuple[Member, ...], int]]]:
    yield edge.a[0].pixels_xxh128, (edge.b, edge.distance)
    yield edge.b[0].pixels_xxh128, (edge.a, edge.distance)


def _removals(joined: tuple[str, dict[str, list[Any]]]) -> list[duplicate_groups.Removal]:
    _, sides = joined
    (rows,) = sides["group"]
    return duplicate_groups.removals(_group(rows), sides["near"])


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


def _group_counts(group: Group) -> tuple[int, int, int, int, int]:
    """(images, blank images, exact groups, their images, groups across splits)."""
    size = len(group.members)
    repeated = size > 1
    crosses = len({m.split for m in group.members}) > 1
    return (size, size if group.kept.blank else 0, int(repeated),
            size if repeated else 0, int(crosses))


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


def _write_report(unused: None, *, output_dir: str, settings: DuplicateSettings,
                  multi_label: bool, pairs: list[Pair], counts: list[tuple[int, ...]],
                  capped: list[tuple[int, int, int]],
                  removed: list[duplicate_groups.Removal],
                  without_hashes: list[int]) -> dict[str, Any]:
    del unused
    ordered = sorted(pairs, key=Pair.sort_key)
    summary = summarise(ordered, counts[0] if counts else (0,) * 5, capped, removed,
                        settings, without_hashes)
    storage.write_text(storage.join(output_dir, contract.DUPLICATE_PAIRS_RELPATH), "".join(
        json.dumps(pair.to_json_fields(multi_label), ensure_ascii=False) + "\n"
        for pair in ordered))
    storage.write_text(storage.join(output_dir, contract.DUPLICATES_SUMMARY_RELPATH),
                       json.dumps(summary, indent=1) + "\n")
    return {"duplicates": summary}


def _hashes_line(row: Row) -> tuple[str, str]:
    """``(key, line)`` of a new image's hashes file line."""
    member = Member.from_row(row)
    return member.key, json.dumps(member.hashes_line(), ensure_ascii=False) + "\n"


def _write_hashes(lines: list[tuple[str, str]], *, path: str, removed: list[str]) -> None:
    gone = set(removed)
    storage.write_text(path, "".join(line for key, line in sorted(lines) if key not in gone))


def _sum_counts(counts: Iterable[tuple[int, ...]]) -> tuple[int, ...]:
    return tuple(sum(column) for column in zip(*counts, strict=True)) or (0,) * 5


class FindDuplicates(beam.PTransform):
    """``PlacedFacts`` of the written images → ``(removals, rejections, entry)``:
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
        history = (version.previous or {}).get("history", [])
        earlier = [versions.hashes_relpath(entry["version"]) for entry in history]
        self._published = [relpath for relpath in earlier
                           if storage.exists(storage.join(output_dir, relpath))]
        self._without_hashes = [entry["version"] for entry, relpath in zip(
            history, earlier, strict=True) if relpath not in self._published]

    def expand(self, facts: beam.PCollection) -> tuple[beam.PCollection, ...]:
        pipeline = facts.pipeline
        new = facts | "Members" >> beam.Map(_new_row)
        published = (pipeline
                     | "PublishedHashFiles" >> beam.Create(self._published)
                     | "ReadPublishedHashes" >> beam.FlatMap(
                         _published_rows, output_dir=self._output_dir))
        groups = (
            (new, published)
            | "AllMembers" >> beam.Flatten()
            | "KeyByPixels" >> beam.Map(lambda row: (row[PIXELS_FIELD], row))
            | "GroupByPixels" >> beam.GroupByKey()
            | "ExactGroups" >> beam.MapTuple(lambda _, rows: _group(rows))
        )
        edges, capped = self._near_edges(groups)
        if self._settings.mode == DROP:
            removed = (
                {"group": groups | "KeyGroups" >> beam.Map(
                    lambda g: (g.kept.pixels_xxh128, tuple(m.row() for m in g.members))),
                 "near": edges | "Neighbours" >> beam.FlatMap(_neighbours)}
                | "JoinNeighbours" >> beam.CoGroupByKey()
                | "ChooseRemovals" >> beam.FlatMap(_removals))
        else:
            removed = pipeline | "NoRemovals" >> beam.Create([])
        removals = (removed
                    | "KeyByShard" >> beam.Map(
                        lambda r: ((r.member.split, r.member.shard), r.member))
                    | "GroupByShard" >> beam.GroupByKey()
                    | "ShardRemovals" >> beam.Map(_shard_removal))
        rejections = removed | "DeadLetters" >> beam.Map(_rejection)
        entry = self._report(new, groups, edges, capped, removed)
        return removals, rejections, entry

    def _near_edges(self, groups: beam.PCollection
                    ) -> tuple[beam.PCollection, beam.PCollection]:
        """``(NearEdge``s, each once; ``(band, value, size)`` of the capped buckets)."""
        settings = self._settings
        compared = (
            groups
            | "BandValues" >> beam.FlatMap(
                _band_entries, edges=duplicate_groups.band_edges(settings.near_distance))
            | "GroupByBand" >> beam.GroupByKey()
            | "CompareBuckets" >> beam.FlatMap(
                _compare, near_distance=settings.near_distance, cap=settings.bucket_cap,
            ).with_outputs(_CAPPED, main="edges")
        )
        edges = (
            compared.edges
            | "KeyEdges" >> beam.Map(lambda e: ((e.a[0].key, e.b[0].key), e))
            | "GroupEdges" >> beam.GroupByKey()
            | "OneEdgeEach" >> beam.MapTuple(lambda _, found: next(iter(found)))
        )
        return edges, compared[_CAPPED]

    def _report(self, new: beam.PCollection, groups: beam.PCollection,
                edges: beam.PCollection, capped: beam.PCollection,
                removed: beam.PCollection) -> beam.PCollection:
        """Writes this version's hashes, then the report; its manifest entry."""
        pairs = ((groups | "ExactPairs" >> beam.FlatMap(Group.pairs),
                  edges | "NearPairs" >> beam.Map(NearEdge.pair))
                 | "AllPairs" >> beam.Flatten())
        counts = (groups
                  | "GroupCounts" >> beam.Map(_group_counts)
                  | "SumCounts" >> beam.CombineGlobally(_sum_counts))
        removed_list = beam.pvalue.AsList(removed)
        return (
            new
            | "HashesLines" >> beam.Map(_hashes_line)
            | "GatherHashes" >> beam.combiners.ToList()
            | "WriteHashes" >> beam.Map(_write_hashes, path=self._hashes_path,
                                        removed=beam.pvalue.AsList(
                                            removed | "RemovedKeys" >> beam.Map(
                                                lambda r: r.member.key)))
            | "WriteReport" >> beam.Map(
                _write_report, output_dir=self._output_dir, settings=self._settings,
                multi_label=self._multi_label, pairs=beam.pvalue.AsList(pairs),
                counts=beam.pvalue.AsList(counts), capped=beam.pvalue.AsList(capped),
                removed=removed_list, without_hashes=self._without_hashes))
