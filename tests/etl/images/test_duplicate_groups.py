"""Exact groups, near pairs by banding, and which copy ``drop`` removes: the pure
functions of ``etl.images.duplicate_groups``, on literal members."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest

from etl.images import duplicate_groups as dg
from etl.images.duplicate_groups import Group, Member


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
        assert set(dg.band_keys(first, edges)) & set(dg.band_keys(second, edges))


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


def test_compare_bands_pairs_only_hashes_within_the_distance():
    from etl.images.duplicate_buckets import NEAR_PART, compare_bands, near_edges

    near = member("a", "train", pixels="1", phash=0b1111)
    also = member("b", "test", pixels="2", phash=0b0011)
    far = member("c", "test", pixels="3", phash=(1 << 64) - 1)
    # One band value's bucket, each group's entry (kept key, kept hash, its rows as
    # JSON), as search_bucket gives them.
    bucket = {0: [(m.key, f"{m.phash:016x}", json.dumps([m.row()]))
                  for m in (far, also, near)]}
    ((tag, edges),) = compare_bands(((0, 0), bucket), near_distance=2, cap=10)
    assert tag == NEAR_PART
    assert [(a, b, distance) for distance, a, b, _, _ in edges] == [("a", "b", 2)]
    # The same edge from another band they share is listed once.
    (edge,) = near_edges(edges + edges)
    pair = edge.pair()
    assert (pair.kind, pair.a.key, pair.b.key, pair.distance) == ("near", "b", "a", 2)


def test_report_only_band_entries_of_new_images_are_read_from_their_hashes_lines():
    from etl.images.duplicate_buckets import (
        compare_bands,
        hashes_lines,
        near_edges,
        search_bucket,
    )

    new = member("new", "train", pixels="1", phash=0b1111, label="dog")
    old = member("old", "test", pixels="2", phash=0b0111, published=True)
    bucket = {m.pixels_xxh128: [m.row()] for m in (new, old)}
    outputs = list(search_bucket(("x", [bucket]), dg.band_edges(2)))
    # The report alone: a new image's entry carries no rows, a published one its own.
    entries = {entry[0]: entry for output in outputs if getattr(output, "tag", "") == "bands"
               for values in output.value[1].values() for entry in values}
    assert entries["new"][2] == ""
    assert json.loads(entries["old"][2])[0][0] == "old"
    ((_, edges),) = compare_bands(((0, 0), {0: list(entries.values())}), near_distance=2,
                                  cap=10)
    lines = dict(hashes_lines([outputs[0][1]]))
    assert list(lines) == ["new"]  # a published image's line is an earlier version's
    (edge,) = near_edges(edges, lines)
    pair = edge.pair()
    assert (pair.a.key, pair.a.split, pair.b.key, pair.b.split, pair.b.labels, pair.distance
            ) == ("old", "test", "new", "train", ("dog",), 1)
    with pytest.raises(KeyError, match="'new' carries no rows"):
        near_edges(edges, {})


def test_an_oversized_band_bucket_is_reported_not_compared():
    from etl.images.duplicate_buckets import CAPPED_PART, compare_bands

    entries = [(f"k{i}", f"{i:016x}", json.dumps([member(f"k{i}", "train", phash=i).row()]))
               for i in range(3)]
    (capped,) = compare_bands(((2, 5), {5: entries}), near_distance=4, cap=2)
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
