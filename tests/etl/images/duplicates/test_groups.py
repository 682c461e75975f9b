"""Exact groups, near pairs by banding, and which copy ``drop`` removes: the pure
functions of ``etl.images.duplicates.groups``, on literal members."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest

from etl.images.duplicates import groups as dg
from etl.images.duplicates.groups import Group, Member


def member(key: str, split: str, pixels: str = "p", bytes_: str | None = None,
           phash: int = 0, published: bool = False, label: str = "cat") -> Member:
    return Member(key, split, (label,), f"/in/{key}", bytes_ or f"b-{key}", pixels, phash,
                  False, published, None if published else 0, None if published else 1)


def test_k_copies_are_k_pairs_with_the_evaluation_copy_kept():
    copies = [member(f"train/{i}", "train", bytes_="same") for i in range(4)]
    group = Group.of([*copies, member("test/0", "test", bytes_="same")])
    pairs = group.pairs()
    assert group.kept.key == "test/0"
    assert len(pairs) == 4
    assert {(p.kind, p.a.key) for p in pairs} == {("bytes", "test/0")}
    assert sorted(p.split_pair() for p in pairs) == ["train-test"] * 4


def test_equal_pixels_with_other_bytes_pair_as_pixels():
    group = Group.of([member("a.png", "train", bytes_="x"), member("b.png", "test", bytes_="y")])
    (pair,) = group.pairs()
    assert (pair.kind, pair.a.key, pair.b.key) == ("pixels", "b.png", "a.png")


def test_validation_outranks_train_and_published_outranks_all():
    assert Group.of([member("t", "train"), member("v", "validation")]).kept.key == "v"
    kept = Group.of([member("t", "test"), member("old", "train", published=True)]).kept
    assert kept.key == "old"


@pytest.mark.parametrize("distance", [0, 1, 4, 6, 10])
def test_bands_cover_the_hash_and_any_pair_within_the_distance_shares_one(distance):
    edges = dg.band_edges(distance)
    assert len(edges) == distance + 1
    assert edges[0][0] == 0 and edges[-1][1] == 64
    assert all(a[1] == b[0] for a, b in itertools.pairwise(edges))
    rng = np.random.default_rng(distance)
    for _ in range(300):
        first = int(rng.integers(0, 2**63)) * 2 + int(rng.integers(0, 2))
        flips = rng.choice(64, size=distance, replace=False)
        second = first ^ sum(1 << int(bit) for bit in flips)
        values = dg.band_values(np.array([first, second], np.uint64), edges)
        assert np.any(values[:, 0] == values[:, 1])


def test_band_values_are_the_bits_of_each_band_first_bit_highest():
    edges = dg.band_edges(4)  # 13, 13, 12, 13, 13 bits
    phash = 0xF0E1D2C3B4A59687
    bits = f"{phash:064b}"
    assert dg.band_values(np.array([phash], np.uint64), edges)[:, 0].tolist() == [
        int(bits[start:stop], 2) for start, stop in edges]


@pytest.mark.parametrize("pairs_at_once", [1, 7, 1 << 20])
def test_close_pairs_are_every_close_pair_of_equal_values_as_brute_force_finds(
        pairs_at_once, monkeypatch):
    monkeypatch.setattr(dg, "_PAIRS_AT_ONCE", pairs_at_once)
    rng = np.random.default_rng(pairs_at_once)
    for _ in range(40):
        n = int(rng.integers(0, 40))
        # Hashes a few bits apart, and values shared by many of them.
        hashes = (rng.integers(0, 2**62, dtype=np.uint64) ^ rng.integers(
            0, 64, n).astype(np.uint64)) if n else np.zeros(0, np.uint64)
        values = rng.integers(0, 4, n).astype(np.uint64)
        near_distance, cap = int(rng.integers(0, 6)), int(rng.integers(2, 15))
        found, capped = dg.close_pairs(hashes, values, near_distance, cap)
        expected, expected_capped = [], []
        for value in sorted(set(values.tolist())):
            same = [i for i in range(n) if values[i] == value]
            if len(same) > cap:
                expected_capped.append((value, len(same)))
                continue
            for i, j in itertools.combinations(same, 2):
                distance = bin(int(hashes[i]) ^ int(hashes[j])).count("1")
                if distance <= near_distance:
                    expected.append((i, j, distance))
        assert sorted(found) == sorted(expected)
        assert capped == expected_capped


def test_band_distance_out_of_range_is_refused():
    with pytest.raises(ValueError, match="0-63"):
        dg.band_edges(64)


@pytest.mark.parametrize("key, labels", [
    ("a/b.jpg", ("cat",)),
    ('quo"te\\back\nline\ttab\x01.png', ('la"bel', "")),
    ("caf\u00e9/\u2028\u2029\u0085\U0001f600.jpg", ()),
    ("x", ("d\u00e9j\u00e0", "vu", "\x7f")),
])
def test_a_hashes_line_is_the_json_of_its_fields(key, labels):
    row = (key, "validation", labels, "/in/x", "ab" * 32, "cd" * 16, "f0e1d2c3b4a59687",
           True, False, 0, 1)
    line = dg.hashes_line(row)
    assert line.endswith("\n") and line.count("\n") == 1
    assert json.loads(line) == {
        "key": key, "split": "validation", "labels": list(labels),
        "bytes_sha256": "ab" * 32, "pixels_xxh128": "cd" * 16,
        "phash": "f0e1d2c3b4a59687", "blank": True}
    # Byte for byte what json.dumps writes (non-ASCII as it is).
    assert line == json.dumps(json.loads(line), ensure_ascii=False) + "\n"


def _band_part(members: list[Member], near_distance: int, band: int = 0):
    """The one part band_parts gives of these members' entries (kept key, hash, rows
    as JSON), all of whose values in ``band`` share their lowest bits."""
    from etl.images.duplicates.buckets import band_parts

    entries = [(m.key, m.phash, json.dumps([m.row()])) for m in members]
    parts = [part for (b, _), part in band_parts(entries, dg.band_edges(near_distance))
             if b == band]
    assert len(parts) == 1
    return parts[0]


def test_compare_bands_pairs_only_hashes_within_the_distance():
    from etl.images.duplicates.buckets import NEAR_PART, compare_bands, near_edges

    # All three share band 0's value (0): only the first two are within 2 bits.
    near = member("a", "train", pixels="1", phash=0b1111)
    also = member("b", "test", pixels="2", phash=0b0011)
    far = member("c", "test", pixels="3", phash=(1 << 43) - 1)
    part = _band_part([far, also, near], near_distance=2)
    ((tag, edges),) = compare_bands(((0, 0), [part]), dg.band_edges(2), near_distance=2,
                                    cap=10)
    assert tag == NEAR_PART
    assert [(a, b, distance) for distance, a, b, _, _ in edges] == [("a", "b", 2)]
    # The same edge from another band they share is listed once.
    (edge,) = near_edges(edges + edges)
    pair = edge.pair()
    assert (pair.kind, pair.a.key, pair.b.key, pair.distance) == ("near", "b", "a", 2)


def test_report_only_band_entries_of_new_images_are_read_from_their_hashes_lines():
    from etl.images.duplicates.buckets import (
        compare_bands,
        hashes_lines,
        near_edges,
        search_bucket,
    )

    new = member("new", "train", pixels="1", phash=0b1111, label="dog")
    old = member("old", "test", pixels="2", phash=0b0111, published=True)
    bucket = {m.pixels_xxh128: [m.row()] for m in (new, old)}
    edges = dg.band_edges(2)
    outputs = list(search_bucket(("x", [bucket]), edges))
    bands = [output.value for output in outputs if getattr(output, "tag", "") == "bands"]
    # The report alone: a new image's entry carries no rows, a published one its own.
    ((key, (keys, hashes, rows)),) = [(key, part) for key, part in bands if key[0] == 0]
    entries = dict(zip(json.loads(keys), rows.split("\n"), strict=True))
    assert np.frombuffer(hashes, "<u8").tolist() == [0b1111, 0b0111]
    assert entries["new"] == ""
    assert json.loads(entries["old"])[0][0] == "old"
    ((_, found),) = compare_bands((key, [part for k, part in bands if k == key]), edges,
                                  near_distance=2, cap=10)
    lines = dict(hashes_lines([outputs[0][1]]))
    assert list(lines) == ["new"]  # a published image's line is an earlier version's
    (edge,) = near_edges(found, lines)
    pair = edge.pair()
    assert (pair.a.key, pair.a.split, pair.b.key, pair.b.split, pair.b.labels, pair.distance
            ) == ("old", "test", "new", "train", ("dog",), 1)
    with pytest.raises(KeyError, match="'new' carries no rows"):
        near_edges(found, {})


def test_band_parts_from_several_buckets_are_compared_together():
    from etl.images.duplicates.buckets import compare_bands

    first = _band_part([member("a", "train", phash=0b1)], near_distance=1)
    second = _band_part([member("b", "test", phash=0b11)], near_distance=1)
    ((_, edges),) = compare_bands(((0, 0), [first, second]), dg.band_edges(1),
                                  near_distance=1, cap=10)
    assert [(a, b, distance) for distance, a, b, _, _ in edges] == [("a", "b", 1)]


def test_an_oversized_band_bucket_is_reported_not_compared():
    from etl.images.duplicates.buckets import CAPPED_PART, compare_bands

    # Band 2 of distance 4 is bits 26-37: these three hashes share its value 5.
    members = [member(f"k{i}", "train", phash=(5 << 26) | i) for i in range(3)]
    part = _band_part(members, near_distance=4, band=2)
    (capped,) = compare_bands(((2, 5), [part]), dg.band_edges(4), near_distance=4, cap=2)
    assert capped == (CAPPED_PART, [(2, 5, 3)])


def test_removals_keep_test_then_validation():
    group = Group.of([member("tr", "train", bytes_="s"), member("va", "validation"),
                      member("te", "test", bytes_="s")])
    found = {r.member.key: (r.partner.key, r.kind) for r in dg.removals(group, [])}
    assert found == {"tr": ("te", "bytes"), "va": ("te", "pixels")}


def test_removals_leave_duplicates_within_one_split():
    group = Group.of([member("a", "train"), member("b", "train")])
    assert dg.removals(group, []) == []


def test_removals_follow_near_neighbours_and_never_touch_published_images():
    group = Group.of([member("tr", "train", pixels="1"),
                      member("old", "test", pixels="1", published=True)])
    neighbour = (member("va", "validation", pixels="2"),)
    found = {r.member.key: (r.partner.key, r.kind, r.distance)
             for r in dg.removals(group, [(neighbour, 3)])}
    # The published test copy outranks the near validation one.
    assert found == {"tr": ("old", "pixels", 0)}
    lonely = Group.of([member("tr2", "train", pixels="3")])
    (removal,) = dg.removals(lonely, [(neighbour, 3)])
    assert (removal.partner.key, removal.kind, removal.distance) == ("va", "near", 3)


def test_a_new_test_image_copying_a_published_train_image_is_removed():
    group = Group.of([member("new", "test"), member("old", "train", published=True)])
    (removal,) = dg.removals(group, [])
    assert (removal.member.key, removal.partner.key) == ("new", "old")


def test_pair_json_names_the_required_fields():
    pair = Group.of([member("a", "train", bytes_="x", label="dog"),
                     member("b", "test", bytes_="x")]).pairs()[0]
    assert pair.to_json_fields(multi_label=False) == {
        "kind": "bytes", "distance": 0, "key_a": "b", "split_a": "test", "label_a": "cat",
        "key_b": "a", "split_b": "train", "label_b": "dog"}
    assert pair.to_json_fields(multi_label=True)["label_a"] == ["cat"]
    assert pair.labels_disagree()
