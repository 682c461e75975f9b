"""The duplicate search's data between Beam stages: members as plain tuples, gathered
into a few buckets, so that a few large elements cross each stage instead of several
small ones per image.

Beam's local runner pays some tens of microseconds for every element that crosses a
stage, pickles any object that is not a plain value, and sizes every side input it
caches object by object: per image, each of those cost more than the image's
signatures (``scripts/benchmark_duplicates.py``). So a member travels as a row
(``duplicate_groups.row_of``), each shard's rows arrive as one element
(``ShardFacts``), and they are gathered by the first hex digit of their pixel hash
(16 buckets, each ``{pixel hash: [rows]}``: its exact groups). One pass over each
bucket (:func:`search_bucket`) gives its part of the report and its groups' band
values; the band values are gathered by band and lowest 4 bits with ``MergeLists``,
a combiner Beam applies before the shuffle (not for the rows: there it would hold
them all in the shard step, beside the images). A band value carries its group's
rows, so comparing a band's bucket gives whole near pairs, with no join back to the
groups. Everything the report needs then reaches one element, a list combined
without defaults (a default would come through a side input).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import apache_beam as beam

from etl.core import storage
from etl.core.shard_step import ShardFacts
from etl.images import duplicate_groups
from etl.images.duplicate_groups import Group, Member, NearEdge

# A member as a tuple of plain values (``duplicate_groups.row_of``): its fields.
Row = tuple[Any, ...]
_KEY, _SPLIT, _SOURCE, _PIXELS, _PHASH, _BLANK, _PUBLISHED = 0, 1, 3, 5, 6, 7, 8
# Exact groups are gathered by the first hex digit of their pixel hash, band values
# by (band, lowest 4 bits).
EXACT_PREFIX = 1
_BAND_BUCKET_MASK = 0xF
# Outputs of search_bucket and compare_bands besides the report's parts.
BANDS, EXACT, CAPPED = "bands", "exact", "capped"
# What drop co-groups by exact bucket: the bucket's groups, the near edges it touches.
GROUPS, NEAR = "groups", "near"
# A group as a band value carries it: (kept key, kept hash, its best_per_split rows as
# JSON, kept row first, each ``_brief``; for the report alone, its kept row only).
# One string, not rows of fields: the band values hold every image once per band, and
# the runner pays for each value it moves; the rows are read only for a pair.
BandEntry = tuple[str, str, str]
# A near edge between two exact groups: (distance, kept key a, kept key b, a's rows,
# b's rows as in BandEntry), a's kept key the smaller.
Edge = tuple[int, str, str, str, str]
# The report's parts, gathered into one list: (tag, value).
BUCKET_PART, NEAR_PART, CAPPED_PART, REMOVED_PART = "bucket", "near", "capped", "removed"
EMPTY_PART = (BUCKET_PART, ((0, 0, 0, 0, 0), [], []))


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


def _group(rows: Iterable[Row]) -> Group:
    return Group.of(map(Member.from_row, rows))


def _brief(row: Row) -> Row:
    """A row without its file's location and hash: the band entries hold every image
    once per band, and each field costs the runner to move. What is left is what a
    pair lists (key, split, labels), what ranks and compares the image, and its
    group's pixel hash (how drop finds its group)."""
    return (*row[:_SOURCE], "", "", *row[_PIXELS:])


def search_bucket(element: tuple[str, Iterable[Mapping[str, list[Row]]]],
                  edges: Sequence[tuple[int, int]], keep_groups: bool = False
                  ) -> Iterator[Any]:
    """One pass over an exact bucket, from the parts each shard (and published
    version) gave: its report part ``(BUCKET_PART, (counts, exact pair rows, hashes
    lines))``; tagged ``BANDS``, ``((band, low bits), {band value: [BandEntry]})`` of
    each group that is not blank; with ``keep_groups`` (``drop``), the bucket itself
    tagged ``EXACT``."""
    bucket_id, parts = element
    bucket = MergeLists().merge_accumulators(parts)
    images = blank = repeated = grouped = crossing = 0
    pairs: list[tuple[Any, ...]] = []
    lines: list[tuple[str, str]] = []
    bands: dict[tuple[int, int], dict[int, list[BandEntry]]] = {}
    for pixels in sorted(bucket):
        rows = bucket[pixels]
        images += len(rows)
        lines += [(row[_KEY], duplicate_groups.hashes_line(row))
                  for row in rows if not row[_PUBLISHED]]
        if len(rows) == 1:  # most images: no group to rank
            kept, best = rows[0], rows
        else:
            group = _group(rows)
            repeated += 1
            grouped += len(rows)
            crossing += len({row[_SPLIT] for row in rows}) > 1
            pairs += [pair.row() for pair in group.pairs()]
            kept, best = group.kept.row(), [m.row() for m in group.best_per_split()]
        if kept[_BLANK]:
            blank += len(rows)
            continue
        entry = (kept[_KEY], kept[_PHASH], json.dumps(
            [_brief(row) for row in best] if keep_groups else [_brief(kept)]))
        for band, value in duplicate_groups.band_keys(int(kept[_PHASH], 16), edges):
            bands.setdefault((band, value & _BAND_BUCKET_MASK), {}).setdefault(
                value, []).append(entry)
    yield BUCKET_PART, ((images, blank, repeated, grouped, crossing), pairs, lines)
    for key, values in sorted(bands.items()):
        yield beam.pvalue.TaggedOutput(BANDS, (key, values))
    if keep_groups:
        yield beam.pvalue.TaggedOutput(EXACT, (bucket_id, bucket))


def compare_bands(element: tuple[tuple[int, int], Mapping[int, Sequence[BandEntry]]],
                  near_distance: int, cap: int) -> Iterator[Any]:
    """The ``Edge``s within each band value's bucket (an edge whose groups share
    several bands comes from each); ``(band, value, size)`` tagged ``CAPPED`` for a
    bucket of more than ``cap`` hashes."""
    (band, _), buckets = element
    for value, entries in buckets.items():
        if len(entries) > cap:
            yield beam.pvalue.TaggedOutput(CAPPED, (band, value, len(entries)))
            continue
        if len(entries) < 2:
            continue
        ordered = sorted(entries)
        hashes = [int(phash, 16) for _, phash, _ in ordered]
        for i, j, distance in duplicate_groups.close_pairs(hashes, near_distance):
            (key_a, _, rows_a), (key_b, _, rows_b) = ordered[i], ordered[j]
            yield distance, key_a, key_b, rows_a, rows_b


def near_edges(edges: Iterable[Edge]) -> list[NearEdge]:
    """The ``NearEdge``s of the edges, each once, in order of their kept keys."""
    unique = {(key_a, key_b): (distance, rows_a, rows_b)
              for distance, key_a, key_b, rows_a, rows_b in edges}
    return [NearEdge.of_rows(distance, json.loads(rows_a), json.loads(rows_b))
            for distance, rows_a, rows_b in (unique[keys] for keys in sorted(unique))]


def edge_buckets(edge: Edge) -> Iterator[tuple[str, Edge]]:
    """``(bucket, edge)`` for the exact bucket of each end of a near edge."""
    ends = (json.loads(edge[3])[0], json.loads(edge[4])[0])
    for bucket in sorted({row[_PIXELS][:EXACT_PREFIX] for row in ends}):
        yield bucket, edge


def removals(element: tuple[str, Mapping[str, Iterable[Any]]]
             ) -> Iterator[duplicate_groups.Removal]:
    """What ``drop`` removes from an exact bucket's groups
    (``duplicate_groups.removals``), from the bucket (``GROUPS``) and the near edges
    that touch it (``NEAR``), co-grouped by bucket."""
    _, joined = element
    groups: dict[str, list[Row]] = {}
    for bucket in joined[GROUPS]:
        groups.update(bucket)
    neighbours: dict[str, dict[str, tuple[tuple[Member, ...], int]]] = {}
    for edge in near_edges(joined[NEAR]):
        for one, other in ((edge.a, edge.b), (edge.b, edge.a)):
            neighbours.setdefault(one[0].pixels_xxh128, {})[other[0].key] = (
                other, edge.distance)
    for pixels in sorted(groups):
        rows, found = groups[pixels], neighbours.get(pixels, {})
        if len(rows) > 1 or found:
            yield from duplicate_groups.removals(_group(rows), list(found.values()))
