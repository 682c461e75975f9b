"""Duplicate images as groups and pairs: pure functions over the signatures the shard
step takes (``signatures``); ``search`` runs them in Beam.

* **Exact groups**: images with the same decoded pixels (``pixels_xxh128``). Each
  group's *kept copy* is its first member by :func:`rank`: a published image (an
  earlier version's), then test, validation, train, then the smallest key. Every
  other member is one pair with the kept copy: ``bytes`` when their files are equal,
  else ``pixels``. So k copies of one image are k pairs, never k(k+1)/2.
* **Near pairs**: the kept copies of two exact groups whose perceptual hashes differ
  in at most ``near_distance`` bits. Candidates come from banding: the 64 bits are cut
  into ``near_distance + 1`` bands, and two hashes within that distance agree on at
  least one band (pigeonhole), so comparing only hashes that share a band value finds
  every such pair. A bucket of more than ``bucket_cap`` hashes is not compared (it
  is reported): its members are found only through their other bands. Blank images
  (no contrast) are never near-compared: all of them share one hash.

A pair is listed once, under its strongest kind (``bytes`` > ``pixels`` > ``near``):
exact pairs join members of one group, near pairs the kept copies of two.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from etl.images.duplicates.signatures import HASH_BITS
from reader.format import contract

BYTES, PIXELS, NEAR = "bytes", "pixels", "near"
KINDS = (BYTES, PIXELS, NEAR)
# Which copy a group keeps: test, then validation, then train.
SPLIT_RANK = {contract.TEST: 0, contract.VALIDATION: 1, contract.TRAIN: 2}
# Hashes within 4 bits: 99.2 % of 5,400 JPEG re-encodes and resizes of sample photos,
# 5 of 179,700 pairs of different ones, overlapping windows of one source photo
# (scripts/measure_duplicates.py, in git at 6b89e51; docs/IMAGE_JOB.md, "Duplicates and
# leakage").
DEFAULT_NEAR_DISTANCE = 4
# Band values shared by more hashes than this are not compared.
DEFAULT_BUCKET_CAP = 2048


@dataclasses.dataclass(frozen=True)
class Member:
    """One image as the duplicate search sees it: where it is, its labels and its
    signatures. ``published``: held by a version an append adds to (never removed;
    ``shard`` and ``position`` are None)."""

    key: str
    split: str
    labels: tuple[str, ...]
    source: str
    bytes_sha256: str
    pixels_xxh128: str
    phash: int
    blank: bool
    published: bool = False
    shard: int | None = None
    position: int | None = None

    def row(self) -> tuple[Any, ...]:
        """The member as a tuple of plain values (:func:`row_of`)."""
        return (self.key, self.split, self.labels, self.source, self.bytes_sha256,
                self.pixels_xxh128, f"{self.phash:016x}", self.blank, self.published,
                self.shard, self.position)

    @classmethod
    def from_row(cls, row: Sequence[Any]) -> Member:
        key, split, labels, source, bytes_sha256, pixels, phash, *rest = row
        return cls(key, split, tuple(labels), source, bytes_sha256, pixels,
                   int(phash, 16), *rest)


def row_of(fields: dict[str, Any], split: str, published: bool = False,
           shard: int | None = None, position: int | None = None) -> tuple[Any, ...]:
    """A member as a tuple of plain values, from the JSON fields of
    ``etl.images.facts.image_facts`` (or a hashes file's line): what crosses Beam's
    stage boundaries (its coder writes those natively; a dataclass is pickled)."""
    return (fields["key"], split, tuple(fields["labels"]), fields.get("source", ""),
            fields["bytes_sha256"], fields["pixels_xxh128"], fields["phash"],
            bool(fields["blank"]), published, shard, position)


def hashes_line(row: Sequence[Any]) -> str:
    """A member's line of a version's hashes file (``keys/hashes-vNNNNN.jsonl``): what
    an append needs of it later. Not its file's location, so the line is the same
    wherever the input was read from (a published image is never removed, so no dead
    letter names its file)."""
    key, split, labels, _, bytes_sha256, pixels, phash, blank, *_ = row
    # The line json_line gives for these fields, by a template: json's encoder cost
    # 20 us a line here (it builds its C encoder per call), the search's largest cost
    # per image. The text fields are encoded by json's own string encoder; the hashes
    # are hex digits.
    return (f'{{"key": {_json_string(key)}, "split": {_json_string(split)}, '
            f'"labels": [{", ".join(map(_json_string, labels))}], '
            f'"bytes_sha256": "{bytes_sha256}", "pixels_xxh128": "{pixels}", '
            f'"phash": "{phash}", "blank": {"true" if blank else "false"}}}\n')


# json.dumps builds a new encoder for every call with an argument; one per image
# line cost more than the rest of the image's search.
_ENCODER = json.JSONEncoder(ensure_ascii=False)
# A str as a JSON string, non-ASCII characters as they are (what _ENCODER does).
_json_string = json.encoder.encode_basestring


def json_line(fields: dict[str, Any]) -> str:
    """A JSON Lines line of ``fields``, non-ASCII characters as they are."""
    return _ENCODER.encode(fields) + "\n"


def rank(member: Member) -> tuple[int, int, str]:
    """Lower ranks are kept: published first, then test, validation, train; then key."""
    return (0 if member.published else 1, SPLIT_RANK[member.split], member.key)


@dataclasses.dataclass(frozen=True)
class Pair:
    """Two duplicate images: ``a`` is the one a group keeps (the lower rank)."""

    kind: str
    distance: int
    a: Member
    b: Member

    def crosses_splits(self) -> bool:
        return self.a.split != self.b.split

    def split_pair(self) -> str:
        """``"train-test"``, ``"validation-validation"``...: the splits in
        train, validation, test order."""
        first, second = sorted((self.a.split, self.b.split), key=contract.SPLITS.index)
        return f"{first}-{second}"

    def labels_disagree(self) -> bool:
        return self.a.labels != self.b.labels

    def to_json_fields(self, multi_label: bool) -> dict[str, Any]:
        def label(member: Member) -> Any:
            if multi_label:
                return list(member.labels)
            return member.labels[0] if member.labels else None

        return {"kind": self.kind, "distance": self.distance,
                "key_a": self.a.key, "split_a": self.a.split, "label_a": label(self.a),
                "key_b": self.b.key, "split_b": self.b.split, "label_b": label(self.b)}

    def sort_key(self) -> tuple[int, str, str]:
        return KINDS.index(self.kind), self.a.key, self.b.key

    def row(self) -> tuple[Any, ...]:
        """The pair as plain values (``(kind, distance, a's row, b's row)``)."""
        return self.kind, self.distance, self.a.row(), self.b.row()

    @classmethod
    def from_row(cls, row: Sequence[Any]) -> Pair:
        kind, distance, a, b = row
        return cls(kind, distance, Member.from_row(a), Member.from_row(b))


@dataclasses.dataclass(frozen=True)
class Group:
    """Images with equal decoded pixels, kept copy first (:func:`rank`)."""

    members: tuple[Member, ...]

    @classmethod
    def of(cls, members: Iterable[Member]) -> Group:
        return cls(tuple(sorted(members, key=rank)))

    @property
    def kept(self) -> Member:
        return self.members[0]

    def best_per_split(self) -> tuple[Member, ...]:
        """The lowest-ranked member of each split present: the copies a near
        neighbour can be a duplicate of."""
        best: dict[str, Member] = {}
        for member in self.members:
            best.setdefault(member.split, member)
        return tuple(best.values())

    def pairs(self) -> list[Pair]:
        kept = self.kept
        return [Pair(BYTES if m.bytes_sha256 == kept.bytes_sha256 else PIXELS, 0, kept, m)
                for m in self.members[1:]]


def band_edges(near_distance: int) -> list[tuple[int, int]]:
    """``(start, stop)`` bit ranges of the ``near_distance + 1`` bands, as equal as
    the 64 bits allow."""
    bands = near_distance + 1
    if not 1 <= bands <= HASH_BITS:
        raise ValueError(f"The near-duplicate distance must be 0-{HASH_BITS - 1}, got "
                         f"{near_distance}.")
    cuts = [round(i * HASH_BITS / bands) for i in range(bands + 1)]
    return list(itertools.pairwise(cuts))


def band_values(hashes: np.ndarray, edges: Sequence[tuple[int, int]]) -> np.ndarray:
    """``[bands, n]``: the value of each band (:func:`band_edges`) of each ``uint64``
    hash of ``hashes``, first bit the highest."""
    shifts = np.array([HASH_BITS - stop for _, stop in edges], np.uint64)[:, None]
    masks = np.array([(1 << (stop - start)) - 1 for start, stop in edges], np.uint64)
    return (hashes[None, :] >> shifts) & masks[:, None]


@dataclasses.dataclass(frozen=True)
class NearEdge:
    """Two exact groups whose kept copies' hashes are ``distance`` bits apart; each
    side as its ``best_per_split`` members (kept copy first)."""

    distance: int
    a: tuple[Member, ...]
    b: tuple[Member, ...]

    def pair(self) -> Pair:
        first, second = sorted((self.a[0], self.b[0]), key=rank)
        return Pair(NEAR, self.distance, first, second)


# Set bits of each byte value: a Hamming distance is a table look-up per byte.
_BITS_IN_BYTE = np.array([bin(value).count("1") for value in range(256)], np.uint8)
# Candidate pairs compared at once: their index arrays stay a few tens of MB.
_PAIRS_AT_ONCE = 1 << 20


def hamming_many(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Differing bits of each pair of ``uint64`` hashes of ``a`` and ``b``."""
    differ = np.ascontiguousarray(a ^ b, dtype=np.uint64)
    return _BITS_IN_BYTE[differ.view(np.uint8)].reshape(-1, 8).sum(axis=1, dtype=np.int64)


def close_pairs(hashes: np.ndarray, values: np.ndarray, near_distance: int, cap: int
                ) -> tuple[list[tuple[int, int, int]], list[tuple[int, int]]]:
    """The candidates of one band: ``(i, j, distance)`` for every two hashes of
    ``hashes`` (``uint64``) with the same band value (``values``) whose distance is
    at most ``near_distance``, each pair once; and ``(value, size)`` of each value
    shared by more than ``cap`` hashes, which are not compared. All pairs of a value
    at once, in NumPy: pair by pair in Python, the comparisons were the search's
    largest cost."""
    order = np.argsort(values, kind="stable")
    ordered = values[order]
    starts = np.flatnonzero(np.concatenate([[True], ordered[1:] != ordered[:-1]]))
    sizes = np.diff(np.append(starts, len(ordered)))
    over = sizes > cap
    capped = [(int(ordered[start]), int(size))
              for start, size in zip(starts[over], sizes[over], strict=True)]
    compared = (sizes >= 2) & ~over
    starts, sizes = starts[compared], sizes[compared]
    found: list[tuple[int, int, int]] = []
    # Runs in chunks of about _PAIRS_AT_ONCE candidate pairs.
    chunks = np.cumsum(sizes * (sizes - 1) // 2) // _PAIRS_AT_ONCE
    cuts = (np.flatnonzero(np.diff(chunks)) + 1).tolist()
    for first, stop in itertools.pairwise([0, *cuts, len(sizes)]):
        left, right = _run_pairs(starts[first:stop], sizes[first:stop])
        distances = hamming_many(hashes[order[left]], hashes[order[right]])
        near = distances <= near_distance
        found += zip(order[left[near]].tolist(), order[right[near]].tolist(),
                     distances[near].tolist(), strict=True)
    return found, capped


def _run_pairs(starts: np.ndarray, sizes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Positions ``(left, right)`` of every pair within each run of ``sizes`` positions
    from ``starts``, ``left < right``."""
    positions = np.repeat(starts, sizes) + _counting(sizes)
    later = np.repeat(starts + sizes, sizes) - positions - 1
    left = np.repeat(positions, later)
    return left, left + 1 + _counting(later)


def _counting(counts: np.ndarray) -> np.ndarray:
    """0, 1, ... counts[0] - 1, 0, 1, ... counts[1] - 1, ... as one array."""
    total = int(counts.sum())
    return np.arange(total) - np.repeat(np.cumsum(counts) - counts, counts)


@dataclasses.dataclass(frozen=True)
class Removal:
    """An image ``--cross_split_duplicates=drop`` removes, and the copy it keeps."""

    member: Member
    partner: Member
    kind: str
    distance: int


def removals(group: Group, neighbours: Iterable[tuple[tuple[Member, ...], int]]
             ) -> list[Removal]:
    """The members of ``group`` to remove: each new image with a duplicate of lower
    rank in another split (in the group, or the best member of a split in a near
    neighbour group), against its lowest-ranked such partner (strongest kind, then
    smallest distance, on a tie)."""
    near = [(member, distance) for best, distance in neighbours for member in best]
    found = []
    for member in group.members:
        if member.published:
            continue
        candidates = [
            (rank(other), KINDS.index(kind), 0, other, kind)
            for other in group.members
            for kind in [BYTES if other.bytes_sha256 == member.bytes_sha256 else PIXELS]
            if other.split != member.split and rank(other) < rank(member)]
        candidates += [(rank(other), KINDS.index(NEAR), distance, other, NEAR)
                       for other, distance in near
                       if other.split != member.split and rank(other) < rank(member)]
        if candidates:
            _, _, distance, partner, kind = min(candidates, key=lambda c: c[:3])
            found.append(Removal(member, partner, kind, distance))
    return found
