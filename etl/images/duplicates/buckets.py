"""The duplicate search's data between Beam stages: members as plain tuples, gathered
into a few buckets, so that a few large elements cross each stage instead of several
small ones per image.

Beam's local runner pays some tens of microseconds for every element that crosses a
stage, pickles any object that is not a plain value, and sizes every side input it
caches object by object: per image, each of those cost more than the image's
signatures (``python -m scripts.benchmarks duplicates``). So a member travels as a row
(``duplicate_groups.row_of``), each shard's rows arrive as one element
(``ShardFacts``), and they are gathered by the first hex digit of their pixel hash
(16 buckets, each ``{pixel hash: [rows]}``: its exact groups). One pass over each
bucket (:func:`search_bucket`) gives its part of the report and one entry per
group, its kept key, hash and rows, which it sends on by band and the lowest 4
bits of the band's value, as columns (:func:`band_parts`): a band's values are
found, sorted and compared in NumPy (:func:`compare_bands`), so no element or
object per image and band crosses the stage. For ``drop``, an entry carries its
group's rows, so comparing a band gives whole near pairs, with no join back to the
groups; for the report alone it carries only a key and a hash, and the report reads
a pair's images from their hashes lines. Everything the report needs then reaches
one element, a list combined without defaults (a default would come through a side
input), in a few large parts: a bucket's keys and lines as one string each, a
band's edges as one list.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import apache_beam as beam
import numpy as np

from etl.core.io import storage
from etl.core.shards.step import ShardFacts
from etl.images.duplicates import groups as duplicate_groups
from etl.images.duplicates.groups import Group, Member, NearEdge

# A member as a tuple of plain values (``duplicate_groups.row_of``): its fields.
Row = tuple[Any, ...]
_KEY, _SPLIT, _SOURCE, _PIXELS, _PHASH, _BLANK, _PUBLISHED = 0, 1, 3, 5, 6, 7, 8
# Exact groups are gathered by the first hex digit of their pixel hash, band entries
# by (band, lowest 4 bits).
EXACT_PREFIX = 1
_BAND_BUCKET_MASK = 0xF
# Outputs of search_bucket besides the report's parts.
BANDS, EXACT = "bands", "exact"
# What drop co-groups by exact bucket: the bucket's groups, the near edges it touches.
GROUPS, NEAR = "groups", "near"
# The entries of some groups for one band, as columns: their kept keys (a JSON
# list), kept hashes (little-endian uint64s) and rows (one line each, joined: its
# best_per_split rows as JSON, kept row first, each ``_brief``; for the report
# alone, only a published kept row, see ``_entry_rows``). The rows are read only
# for a pair.
BandPart = tuple[str, bytes, str]
_HASH_DTYPE = np.dtype("<u8")
# A near edge between two exact groups: (distance, kept key a, kept key b, a's rows,
# b's rows as in BandPart), a's kept key the smaller.
Edge = tuple[int, str, str, str, str]
# The report's parts, gathered into one list: (tag, value). A few large values, not
# one per image or pair: the local runner encodes and decodes every value twice on
# the way (it writes a Flatten of several producers out and reads it back), and
# pays for each object.
BUCKET_PART, NEAR_PART, CAPPED_PART, REMOVED_PART = "bucket", "near", "capped", "removed"
# A bucket's keys and hashes lines travel as one string each: the keys as a JSON
# list, the lines joined (each ends in a newline, and JSON escapes any in a value).
EMPTY_PART = (BUCKET_PART, ((0, 0, 0, 0, 0), [], "[]", ""))


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


def _merged(parts: Iterable[Mapping[str, list[Row]]]) -> dict[str, list[Row]]:
    """``{key: [values]}`` dicts → one, each key's values concatenated."""
    merged: dict[str, list[Row]] = {}
    for part in parts:
        for key, values in part.items():
            merged.setdefault(key, []).extend(values)
    return merged


def _group(rows: Iterable[Row]) -> Group:
    return Group.of(map(Member.from_row, rows))


def _brief(row: Row) -> Row:
    """A row without its file's location and hash: the band entries hold every image
    once per band, and each field costs the runner to move. What is left is what a
    pair lists (key, split, labels), what ranks and compares the image, and its
    group's pixel hash (how drop finds its group)."""
    return (*row[:_SOURCE], "", "", *row[_PIXELS:])


def _entry_rows(kept: Row, best: Sequence[Row], keep_groups: bool) -> str:
    """A group's entry's rows (``BandPart``): for drop, the group's best per split;
    for the report alone, its kept row, or none for a new image (the report reads
    that from the image's hashes line, which it gathers anyway): most entries then
    carry only a key and a hash, which halves the search's memory and saves a JSON
    encode per image and a decode per pair end."""
    if keep_groups:
        return json.dumps([_brief(row) for row in best])
    return json.dumps([_brief(kept)]) if kept[_PUBLISHED] else ""


def search_bucket(element: tuple[str, Iterable[Mapping[str, list[Row]]]],
                  edges: Sequence[tuple[int, int]], keep_groups: bool = False
                  ) -> Iterator[Any]:
    """One pass over an exact bucket, from the parts each shard (and published
    version) gave: its report part ``(BUCKET_PART, (counts, exact pair rows, keys,
    hashes lines))`` (of its new images, by pixel hash; :func:`hashes_lines` reads
    them, in key order); tagged ``BANDS``, ``((band, low bits), BandPart)`` of the
    groups that are not blank (:func:`band_parts`); with ``keep_groups``
    (``drop``), the bucket itself tagged ``EXACT``."""
    bucket_id, parts = element
    bucket = _merged(parts)
    images = blank = repeated = grouped = crossing = 0
    pairs: list[tuple[Any, ...]] = []
    lines: list[tuple[str, str]] = []  # (key, hashes line)
    entries: list[tuple[str, int, str]] = []  # (kept key, hash, rows) of each group
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
        entries.append((kept[_KEY], int(kept[_PHASH], 16),
                        _entry_rows(kept, best, keep_groups)))
    yield BUCKET_PART, ((images, blank, repeated, grouped, crossing), pairs,
                        json.dumps([key for key, _ in lines], ensure_ascii=False),
                        "".join(line for _, line in lines))
    for key, part in band_parts(entries, edges):
        yield beam.pvalue.TaggedOutput(BANDS, (key, part))
    if keep_groups:
        yield beam.pvalue.TaggedOutput(EXACT, (bucket_id, bucket))


def band_parts(entries: Sequence[tuple[str, int, str]], edges: Sequence[tuple[int, int]]
               ) -> Iterator[tuple[tuple[int, int], BandPart]]:
    """``((band, low bits), BandPart)``: the groups' entries ``(kept key, hash, rows)``
    by each band's value's lowest 4 bits, in ``entries``' order."""
    if not entries:
        return
    keys, phashes, rows = zip(*entries, strict=True)
    hashes = np.array(phashes, dtype=_HASH_DTYPE)
    for band, values in enumerate(duplicate_groups.band_values(hashes, edges)):
        low = (values & _BAND_BUCKET_MASK).astype(np.intp)
        order = np.argsort(low, kind="stable")
        bounds = np.searchsorted(low[order], np.arange(_BAND_BUCKET_MASK + 2))
        for low_bits, (start, stop) in enumerate(itertools.pairwise(bounds.tolist())):
            if start < stop:
                chosen = order[start:stop].tolist()
                yield (band, low_bits), (
                    json.dumps([keys[i] for i in chosen], ensure_ascii=False),
                    hashes[chosen].tobytes(), "\n".join(rows[i] for i in chosen))


def _band_entries(parts: Iterable[BandPart]) -> tuple[list[str], np.ndarray, list[str]]:
    keys: list[str] = []
    hashes: list[np.ndarray] = []
    rows: list[str] = []
    for part_keys, part_hashes, part_rows in parts:
        keys += json.loads(part_keys)
        hashes.append(np.frombuffer(part_hashes, dtype=_HASH_DTYPE))
        # Each entry's rows are JSON (json.dumps escapes a newline): one line each.
        rows += part_rows.split("\n")
    return keys, np.concatenate(hashes) if hashes else np.zeros(0, _HASH_DTYPE), rows


def compare_bands(element: tuple[tuple[int, int], Iterable[BandPart]],
                  edges: Sequence[tuple[int, int]], near_distance: int, cap: int
                  ) -> Iterator[tuple[str, list[Any]]]:
    """The report's parts of one band's entries (those whose value has the same lowest
    bits): ``(NEAR_PART, [Edge])``, the edges between entries with the same band
    value (an edge whose groups share several bands comes from each), and
    ``(CAPPED_PART, [(band, value, size)])`` for the values of more than ``cap``
    hashes; each only when not empty."""
    (band, _), parts = element
    keys, hashes, rows = _band_entries(parts)
    values = duplicate_groups.band_values(hashes, [edges[band]])[0]
    found, capped = duplicate_groups.close_pairs(hashes, values, near_distance, cap)
    near: list[Edge] = []
    for i, j, distance in found:
        a, b = (i, j) if keys[i] < keys[j] else (j, i)
        near.append((distance, keys[a], keys[b], rows[a], rows[b]))
    if near:
        yield NEAR_PART, near
    if capped:
        yield CAPPED_PART, [(band, value, size) for value, size in capped]


def hashes_lines(parts: Iterable[tuple[Any, ...]]) -> list[tuple[str, str]]:
    """``(key, hashes line)`` of the new images of the bucket parts (the values of
    ``BUCKET_PART``s), in key order."""
    found: list[tuple[str, str]] = []
    for _, _, keys, lines in parts:
        # Not splitlines(): JSON leaves U+2028 and its kin in a value as they are.
        found += zip(json.loads(keys), (f"{line}\n" for line in lines.split("\n")[:-1]),
                     strict=True)
    return sorted(found)


def part_edges(part: tuple[str, Any]) -> list[Edge]:
    """The edges of a report part from :func:`compare_bands` (none from a
    ``CAPPED_PART``)."""
    tag, value = part
    return value if tag == NEAR_PART else []


def near_edges(edges: Iterable[Edge], lines_by_key: Mapping[str, str] | None = None
               ) -> list[NearEdge]:
    """The ``NearEdge``s of the edges, each once, in order of their kept keys; an end
    that carries no rows (a new image, in the report alone) is read from its line in
    ``lines_by_key`` (key → this version's hashes line)."""
    unique = {(key_a, key_b): (distance, rows_a, rows_b)
              for distance, key_a, key_b, rows_a, rows_b in edges}
    # An image is often the end of several edges, with the same rows each time.
    read: dict[str, tuple[Member, ...]] = {}

    def members(key: str, payload: str) -> tuple[Member, ...]:
        if key in read:
            return read[key]
        if payload:
            rows = json.loads(payload)
        elif lines_by_key is None or key not in lines_by_key:
            raise KeyError(f"The near edge's end {key!r} carries no rows and has no "
                           f"hashes line.")
        else:
            fields = json.loads(lines_by_key[key])
            rows = [duplicate_groups.row_of(fields, fields["split"])]
        read[key] = tuple(map(Member.from_row, rows))
        return read[key]

    return [NearEdge(distance, members(key_a, rows_a), members(key_b, rows_b))
            for (key_a, key_b), (distance, rows_a, rows_b) in sorted(unique.items())]


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
