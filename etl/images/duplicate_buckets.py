"""The duplicate search's data between Beam stages: members as plain tuples, gathered
into a few buckets, so that a few large elements cross each stage instead of several
small ones per image.

Beam's local runner pays some tens of microseconds for every element that crosses a
stage, and pickles any object that is not a plain value: per image that cost more
than the image's signatures (``scripts/benchmark_duplicates.py``). So a member
travels as a row (``duplicate_groups.row_of``), each shard's rows arrive as one
element (``ShardFacts``), and they are gathered by the first hex digit of their pixel
hash (16 buckets, each ``{pixel hash: [rows]}``: its exact groups). Band values are
gathered by band and lowest 4 bits with ``MergeLists``, a combiner Beam applies
before the shuffle (not for the rows: there it would hold them all in the shard
step, beside the images). The near edges, few, are joined back to the buckets
through side inputs read once per bucket.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import apache_beam as beam

from etl.core import storage
from etl.core.shard_step import ShardFacts
from etl.images import duplicate_groups
from etl.images.duplicate_groups import Group, Member, NearEdge, Pair

# A member as a tuple of plain values (``duplicate_groups.row_of``): its fields.
Row = tuple[Any, ...]
_KEY, _SPLIT, _SOURCE, _PIXELS, _PHASH, _BLANK, _PUBLISHED = 0, 1, 3, 5, 6, 7, 8
# A bucket of exact groups: pixel hash → rows.
Bucket = Mapping[str, Sequence[Row]]
# Exact groups are gathered by the first hex digit of their pixel hash, band values
# by (band, lowest 4 bits).
EXACT_PREFIX = 1
_BAND_BUCKET_MASK = 0xF
# Tag of the buckets too large to compare.
CAPPED = "capped"
# A near edge between two exact groups: (kept key a, kept key b, pixels a, pixels b,
# distance), a's kept key the smaller.
Edge = tuple[str, str, str, str, int]


def _bucketed(rows: Iterable[Row]) -> Iterator[tuple[str, dict[str, list[Row]]]]:
    found: dict[str, dict[str, list[Row]]] = {}
    for row in rows:
        pixels = row[_PIXELS]
        found.setdefault(pixels[:EXACT_PREFIX], {}).setdefault(pixels, []).append(row)
    return iter(sorted(found.items()))


def shard_buckets(element: ShardFacts, keep_sources: bool = True
                  ) -> Iterator[tuple[str, dict[str, list[Row]]]]:
    """A shard's images as rows, by bucket: ``(bucket, {pixel hash: [rows]})``;
    without ``keep_sources`` (nothing is removed, so no dead letter names a file),
    without their files' locations."""
    rows = (duplicate_groups.row_of(fields, element.split, shard=element.shard,
                                    position=position)
            for position, fields in enumerate(element.facts))
    if not keep_sources:
        rows = ((*row[:_SOURCE], "", *row[_SOURCE + 1:]) for row in rows)
    return _bucketed(rows)


def merged(bucket: str, parts: Iterable[Mapping[str, list[Row]]]) -> dict[str, list[Row]]:
    """One bucket from the parts each shard (and published version) gave."""
    del bucket
    return MergeLists().merge_accumulators(parts)


def published_buckets(relpath: str, output_dir: str
                      ) -> Iterator[tuple[str, dict[str, list[Row]]]]:
    """The images an earlier version kept in its hashes file, by bucket."""
    lines = storage.read_text(storage.join(output_dir, relpath)).splitlines()
    fields = (json.loads(line) for line in lines if line.strip())
    return _bucketed(duplicate_groups.row_of(f, f["split"], published=True) for f in fields)


class MergeLists(beam.CombineFn):
    """``{key: [values]}`` dicts → one, each key's values concatenated."""

    def create_accumulator(self) -> dict[Any, list[Any]]:
        return {}

    def add_input(self, accumulator: dict[Any, list[Any]], value: Mapping[Any, list[Any]]
                  ) -> dict[Any, list[Any]]:
        for key, values in value.items():
            accumulator.setdefault(key, []).extend(values)
        return accumulator

    def merge_accumulators(self, accumulators: Iterable[dict[Any, list[Any]]]
                           ) -> dict[Any, list[Any]]:
        merged: dict[Any, list[Any]] = {}
        for accumulator in accumulators:
            self.add_input(merged, accumulator)
        return merged

    def extract_output(self, accumulator: dict[Any, list[Any]]) -> dict[Any, list[Any]]:
        return accumulator


def _kept(rows: Sequence[Row]) -> Row:
    """The row of the copy a group keeps (``duplicate_groups.rank``)."""
    return min(rows, key=lambda row: (0 if row[_PUBLISHED] else 1,
                                      duplicate_groups.SPLIT_RANK[row[_SPLIT]], row[_KEY]))


def _group(rows: Iterable[Row]) -> Group:
    return Group.of(map(Member.from_row, rows))


def band_entries(bucket: Bucket, edges: Sequence[tuple[int, int]]
                 ) -> Iterator[tuple[tuple[int, int], dict[int, list[Any]]]]:
    """``((band, low bits), {band value: [(band value, kept key, hash low 32 bits,
    high 32 bits, pixels)]})`` of the bands of each group that is not blank."""
    found: dict[tuple[int, int], dict[int, list[Any]]] = {}
    for pixels, rows in bucket.items():
        kept = _kept(rows)
        if kept[_BLANK]:
            continue
        phash = int(kept[_PHASH], 16)
        entry = (kept[_KEY], phash & 0xFFFFFFFF, phash >> 32, pixels)
        for band, value in duplicate_groups.band_keys(phash, edges):
            found.setdefault((band, value & _BAND_BUCKET_MASK), {}).setdefault(
                value, []).append(entry)
    return iter(sorted(found.items()))


def compare_bands(element: tuple[tuple[int, int], Mapping[int, Sequence[Any]]],
                  near_distance: int, cap: int) -> Iterator[Any]:
    """The ``Edge``s within each band value's bucket; ``(band, value, size)`` tagged
    ``CAPPED`` for a bucket of more than ``cap`` hashes."""
    (band, _), buckets = element
    for value, entries in buckets.items():
        if len(entries) > cap:
            yield beam.pvalue.TaggedOutput(CAPPED, (band, value, len(entries)))
            continue
        if len(entries) < 2:
            continue
        ordered = sorted(entries)
        hashes = [high << 32 | low for _, low, high, _ in ordered]
        for i, j, distance in duplicate_groups.close_pairs(hashes, near_distance):
            yield ordered[i][0], ordered[j][0], ordered[i][3], ordered[j][3], distance


def edge_ends(bucket: Bucket, edges: Sequence[Edge]
              ) -> Iterator[tuple[Edge, tuple[str, tuple[Row, ...]]]]:
    """``(edge, (pixels, best rows))`` for each group of the bucket an edge touches.
    (The edges are few; a side input looked up key by key would cost a runner round
    trip per group.)"""
    by_pixels: dict[str, list[Edge]] = {}
    for edge in edges:
        by_pixels.setdefault(edge[2], []).append(edge)
        by_pixels.setdefault(edge[3], []).append(edge)
    for pixels, found in sorted(by_pixels.items()):
        rows = bucket.get(pixels)
        if rows:
            best = tuple(member.row() for member in _group(rows).best_per_split())
            for edge in found:
                yield edge, (pixels, best)


def near_edge(edge: Edge, ends: Iterable[tuple[str, tuple[Row, ...]]]) -> NearEdge:
    """The ``NearEdge`` of an edge whose two ends' best rows were looked up."""
    sides = dict(ends)
    _, _, pixels_a, pixels_b, distance = edge
    return NearEdge(distance, tuple(map(Member.from_row, sides[pixels_a])),
                    tuple(map(Member.from_row, sides[pixels_b])))


def exact_pairs(bucket: Bucket) -> Iterator[Pair]:
    for rows in bucket.values():
        if len(rows) > 1:
            yield from _group(rows).pairs()


def counts(bucket: Bucket) -> tuple[int, ...]:
    """(images, blank images, exact groups, their images, groups across splits)."""
    images = blank = repeated = grouped = crossing = 0
    for rows in bucket.values():
        size = len(rows)
        images += size
        blank += size if rows[0][_BLANK] else 0
        if size > 1:
            repeated += 1
            grouped += size
            crossing += len({row[_SPLIT] for row in rows}) > 1
    return images, blank, repeated, grouped, crossing


def hashes_lines(bucket: Bucket) -> list[tuple[str, str]]:
    """``(key, line)`` of each new image's line of this version's hashes file."""
    return [(row[_KEY], duplicate_groups.hashes_line(row))
            for rows in bucket.values() for row in rows if not row[_PUBLISHED]]


def removals(bucket: Bucket, near: Sequence[NearEdge]
             ) -> Iterator[duplicate_groups.Removal]:
    """What ``drop`` removes from the bucket's groups (``duplicate_groups.removals``),
    given the near edges (few, as for :func:`edge_ends`)."""
    neighbours: dict[str, list[tuple[tuple[Member, ...], int]]] = {}
    for edge in near:
        neighbours.setdefault(edge.a[0].pixels_xxh128, []).append((edge.b, edge.distance))
        neighbours.setdefault(edge.b[0].pixels_xxh128, []).append((edge.a, edge.distance))
    for pixels, rows in bucket.items():
        found = neighbours.get(pixels, [])
        if len(rows) > 1 or found:
            yield from duplicate_groups.removals(_group(rows), found)
