"""etl/core/publishing/manifest.py: ManifestContent; reader/format/contract.py's helpers."""

from __future__ import annotations

import pytest

from etl.core.publishing import accounting, manifest
from etl.core.shards.placement import ShardEntry
from reader.format import contract


def _shard(split: str, index: int, num_records: int, num_bytes: int) -> ShardEntry:
    return ShardEntry(split, index, contract.shard_relpath("images", split, index, 3),
                      num_records, num_bytes, f"{split}{index}" * 4)


SHARDS = [_shard("train", 2, 5, 500), _shard("train", 0, 7, 700),
          _shard("test", 0, 2, 200), _shard("train", 1, 6, 600)]


def _build(shards=SHARDS, label_counts=(), extra=None) -> dict:
    return manifest.ManifestContent(
        name="images", kind="images", task="classification", extra=extra or {},
        shards=shards, label_counts=label_counts,
        rejected={"count": 0, "by_reason": {}},
        features={"label": {"kind": "fixed_len", "dtype": "int64", "shape": []}},
        label_vocab=["cat", "dog"], preprocessing={"image_size": 16},
        versions={"python": "3.11"}).to_dict()


# --- ManifestContent ------------------------------------------------------------------

def test_manifest_content_records_kind_task_and_extra_entries():
    built = _build(extra={"timeseries": {"window_size": 4}})
    assert (built["kind"], built["task"]) == ("images", "classification")
    assert built["timeseries"] == {"window_size": 4}


def test_manifest_content_refuses_extra_entries_that_clash():
    with pytest.raises(ValueError, match="splits"):
        _build(extra={"splits": {}})


def test_manifest_content_lists_every_split_even_when_empty():
    splits = _build()["splits"]
    assert list(splits) == ["train", "validation", "test"]
    assert splits["validation"] == {"num_records": 0, "num_bytes": 0, "shards": []}


def test_manifest_content_with_train_only_has_empty_validation_and_test():
    splits = _build(shards=[_shard("train", 0, 3, 30)])["splits"]
    assert splits["validation"] == splits["test"] == {
        "num_records": 0, "num_bytes": 0, "shards": []}
    assert splits["train"]["num_records"] == 3


@pytest.mark.parametrize("shards", [[], [_shard("test", 0, 2, 200)]])
def test_require_train_refuses_empty_train_split(shards):
    with pytest.raises(accounting.EmptyTrainSplitError,
                       match=r"^The train split is empty: no example was written to it, "):
        manifest.require_train(_build(shards=shards))


def test_require_train_accepts_a_train_split_with_records():
    assert manifest.require_train(_build(shards=[_shard("train", 0, 1, 10)])) is None


def test_manifest_content_sorts_shards_by_index():
    paths = [s["path"] for s in _build()["splits"]["train"]["shards"]]
    assert paths == [contract.shard_relpath("images", "train", i, 3) for i in range(3)]


def test_manifest_content_shard_entries_carry_only_file_fields():
    entry = _build()["splits"]["test"]["shards"][0]
    assert entry == {"path": "test/images-test-00000-of-00003.tfrecord.gz",
                     "num_records": 2, "num_bytes": 200, "sha256": "test0" * 4}


def test_manifest_content_sums_records_and_bytes_per_split():
    splits = _build()["splits"]
    assert (splits["train"]["num_records"], splits["train"]["num_bytes"]) == (18, 1800)
    assert (splits["test"]["num_records"], splits["test"]["num_bytes"]) == (2, 200)


def test_manifest_content_accepts_one_shot_iterables():
    # ``shards`` is typed Iterable and is scanned once per split: a generator must give
    # the same manifest as a list.
    assert _build(shards=(s for s in SHARDS)) == _build(shards=list(SHARDS))


def test_manifest_content_groups_label_counts_per_split():
    counts = [(("train", "dog"), 3), (("test", "cat"), 1), (("train", "cat"), 4),
              (("train", "dog"), 2)]
    label_counts = _build(label_counts=counts)["label_counts"]
    assert label_counts == {"train": {"cat": 4, "dog": 5}, "validation": {},
                            "test": {"cat": 1}}
    assert list(label_counts["train"]) == ["cat", "dog"]


def test_manifest_content_top_level_fields():
    built = _build()
    assert sorted(built) == ["compression", "features", "format_version", "kind", "label_counts",
                             "label_vocab", "name", "preprocessing", "rejected", "splits",
                             "task", "transform_output", "versions"]
    assert built["format_version"] == contract.FORMAT_VERSION
    assert built["name"] == "images"
    assert built["transform_output"] == {"transform_fn": "transform_fn",
                                         "transformed_metadata": "transformed_metadata"}
    assert built["label_vocab"] == ["cat", "dog"]
    assert built["rejected"] == {"count": 0, "by_reason": {}}


def test_manifest_content_does_not_depend_on_shard_order():
    reordered = list(reversed(SHARDS))
    assert contract.dumps_manifest(_build()) == contract.dumps_manifest(
        _build(shards=reordered))


# --- contract: shard names ------------------------------------------------------------

def test_shard_filename_format():
    assert contract.shard_filename("images", "train", 3, 12) == (
        "images-train-00003-of-00012.tfrecord.gz")


def test_shard_relpath_prefixes_split_folder():
    assert contract.shard_relpath("ds", "validation", 0, 1) == (
        "validation/ds-validation-00000-of-00001.tfrecord.gz")


@pytest.mark.parametrize(("index", "num_shards"), [(-1, 3), (3, 3), (7, 3), (0, 0)])
def test_shard_filename_rejects_bad_index(index, num_shards):
    with pytest.raises(ValueError, match=rf"Shard index {index} is outside \[0, {num_shards}\)"):
        contract.shard_filename("images", "train", index, num_shards)


# --- contract: manifest text ----------------------------------------------

def test_dumps_manifest_sorts_keys_at_every_level():
    text = contract.dumps_manifest({"b": 1, "a": {"z": 2, "y": [3, {"d": 4, "c": 5}]}})
    assert text == (
        '{\n  "a": {\n    "y": [\n      3,\n      {\n        "c": 5,\n        "d": 4\n'
        '      }\n    ],\n    "z": 2\n  },\n  "b": 1\n}\n')


def test_dumps_manifest_ignores_insertion_order():
    assert contract.dumps_manifest({"x": 1, "y": 2}) == contract.dumps_manifest(
        {"y": 2, "x": 1})


def test_dumps_manifest_keeps_non_ascii():
    assert contract.dumps_manifest({"label": "été"}) == '{\n  "label": "été"\n}\n'
