"""FindDuplicates in Beam on a few literal records: the report's files, the removals
of ``drop``, their dead letters, and an append checked against kept hashes."""

from __future__ import annotations

import json
import os

import apache_beam as beam
import pytest
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to

from etl.core.run import versions
from etl.core.shards.removal import Removal
from etl.core.shards.step import ShardFacts
from etl.images.duplicates.search import DuplicateSettings, FindDuplicates
from reader.format import contract

RUNNER = "apache_beam.runners.portability.fn_api_runner.FnApiRunner"


def fact(key: str, *, bytes_: str, pixels: str, phash: int, label: str = "cat",
         blank: bool = False) -> dict:
    return {"key": key, "source": f"/in/{key}", "labels": [label], "bytes_sha256": bytes_,
            "pixels_xxh128": pixels, "phash": f"{phash:016x}", "blank": blank}


# Two byte copies (train, test), a pixel copy (validation of that test image), a near
# pair (train, test: 3 bits), a far image, and three blank images sharing one hash;
# as the shard steps give them, shard by shard in record order.
FACTS = [
    ShardFacts("train", 0, (
        fact("train/a", bytes_="A", pixels="PA", phash=0x0F0F0F0F0F0F0F0F),
        fact("train/b", bytes_="B", pixels="PB", phash=0x3333333333333333))),
    ShardFacts("test", 0, (
        fact("test/a", bytes_="A", pixels="PA", phash=0x0F0F0F0F0F0F0F0F),
        fact("test/b", bytes_="B2", pixels="PB2", phash=0x3333333333333333 ^ 0b111))),
    ShardFacts("validation", 0, (
        fact("val/a", bytes_="A2", pixels="PA", phash=0x0F0F0F0F0F0F0F0F, label="dog"),)),
    ShardFacts("train", 1, (
        fact("train/far", bytes_="F", pixels="PF", phash=0x5555555555555555),
        *(fact(f"train/blank{i}", bytes_=f"W{i}", pixels=f"PW{i}",
               phash=0x8000000000000000, blank=True) for i in range(3)))),
]
KEYS = sorted(f["key"] for shard in FACTS for f in shard.facts)


def _run(out: str, mode: str, version: versions.DatasetVersion = versions.FIRST_VERSION,
         records: list[ShardFacts] = FACTS) -> None:
    with TestPipeline(runner=RUNNER) as p:
        removals, rejections, entry = (
            p | beam.Create(records)
            | FindDuplicates(out, DuplicateSettings(mode), version, multi_label=False))
        if mode == "drop":
            assert_that(removals, equal_to([Removal("train", 0, (0, 1), ("cat", "cat")),
                                            Removal("validation", 0, (0,), ("dog",))]),
                        label="Removals")
            assert_that(rejections | beam.Map(lambda r: (r.key, r.split, r.duplicate_of)),
                        equal_to([("train/a", "train", "test/a"),
                                  ("val/a", "validation", "test/a"),
                                  ("train/b", "train", "test/b")]), label="DeadLetters")
        else:  # nothing to take out of the shards
            assert (removals, rejections) == (None, None)
        assert_that(entry | beam.Map(lambda e: e["duplicates"]["cross_split_pairs"]),
                    equal_to([3]), label="Entry")


def _lines(path: str) -> list[dict]:
    with open(path) as f:
        return [json.loads(line) for line in f]


@pytest.mark.parametrize("mode", ["report", "drop"])
def test_report_lists_each_pair_once_under_its_strongest_kind(tmp_path, mode):
    out = str(tmp_path)
    _run(out, mode)
    pairs = _lines(os.path.join(out, contract.DUPLICATE_PAIRS_RELPATH))
    assert [(p["kind"], p["key_a"], p["key_b"], p["distance"]) for p in pairs] == [
        ("bytes", "test/a", "train/a", 0), ("pixels", "test/a", "val/a", 0),
        ("near", "test/b", "train/b", 3)]
    with open(os.path.join(out, contract.DUPLICATES_SUMMARY_RELPATH)) as f:
        summary = json.load(f)
    assert summary["pairs"]["bytes"]["train-test"] == 1
    assert summary["pairs"]["pixels"]["validation-test"] == 1
    assert summary["pairs"]["near"]["train-test"] == 1
    assert summary["label_disagreements"] == {"bytes": 0, "pixels": 1, "near": 0}
    assert summary["exact_groups"] == {"groups": 1, "images": 3, "cross_split": 1}
    # The blank images share a hash but are never near-compared.
    assert summary["blank_images"] == 3 and summary["images"] == 9
    assert summary["removed"] == ({"train": 2, "validation": 1, "test": 0}
                                  if mode == "drop" else {"train": 0, "validation": 0,
                                                          "test": 0})
    hashes = _lines(os.path.join(out, versions.hashes_relpath(1)))
    gone = {"train/a", "val/a", "train/b"} if mode == "drop" else set()
    assert [h["key"] for h in hashes] == [key for key in KEYS if key not in gone]


def test_an_oversized_bucket_is_reported_not_compared(tmp_path):
    # Seven hashes share their first band (a bucket over the cap); two of them, equal,
    # also share their second band, where they are found, once.
    twins = [fact(f"twin{i}", bytes_=f"t{i}", pixels=f"t{i}", phash=(0xABCD << 48) | 1 << 20)
             for i in range(2)]
    records = [ShardFacts("train", 0, (*(
        fact(f"k{i}", bytes_=str(i), pixels=str(i), phash=(0xABCD << 48) | i)
        for i in range(5)), *twins))]
    out = str(tmp_path)
    with TestPipeline(runner=RUNNER) as p:
        _, _, entry = (p | beam.Create(records) | FindDuplicates(
            out, DuplicateSettings("report", near_distance=1, bucket_cap=4),
            versions.FIRST_VERSION, multi_label=False))
        assert_that(entry | beam.Map(lambda e: e["duplicates"]["capped_buckets"]),
                    equal_to([{"buckets": 1, "hashes": 7}]))
    pairs = _lines(os.path.join(out, contract.DUPLICATE_PAIRS_RELPATH))
    assert [(p["kind"], p["key_a"], p["key_b"], p["distance"]) for p in pairs] == [
        ("near", "twin0", "twin1", 0)]


def test_an_append_checks_new_images_against_kept_hashes(tmp_path):
    out = str(tmp_path)
    os.makedirs(os.path.join(out, "keys"))
    old = FACTS[1].facts[0]  # test/a, published in version 1
    with open(os.path.join(out, versions.hashes_relpath(1)), "w") as f:
        f.write(json.dumps({**old, "split": "test"}) + "\n")
    previous = {"history": [{"version": 1}]}
    new = [ShardFacts("train", 0, (
        fact("train/new", bytes_="A", pixels="PA", phash=0x0F0F0F0F0F0F0F0F),))]
    with TestPipeline(runner=RUNNER) as p:
        removals, rejections, _ = (p | beam.Create(new) | FindDuplicates(
            out, DuplicateSettings("drop"), versions.DatasetVersion(2, previous),
            multi_label=False))
        assert_that(removals, equal_to([Removal("train", 0, (0,), ("cat",))]),
                    label="Removals")
        assert_that(rejections | beam.Map(lambda r: r.duplicate_of),
                    equal_to(["test/a"]), label="DeadLetters")
    (pair,) = _lines(os.path.join(out, contract.DUPLICATE_PAIRS_RELPATH))
    assert (pair["key_a"], pair["key_b"]) == ("test/a", "train/new")
    # Version 2 stores no image: no hashes file (as no key index without keys).
    assert not os.path.exists(os.path.join(out, versions.hashes_relpath(2)))
