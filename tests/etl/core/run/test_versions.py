"""Unit tests of etl/core/run/versions.py: file names, the history entry, the merge."""

from __future__ import annotations

import json

import pytest

from etl.core.run import versions
from reader.format import contract


def _manifest(version: int, records: dict[str, list[int]], rejected: dict[str, list[str]],
              inputs: int, prefix: str) -> dict:
    """A manifest of one version: per split, its shards' record counts; per reason,
    the rejected keys."""
    splits = {}
    for split in contract.SPLITS:
        shards = [{"path": f"{split}/{prefix}-{split}-{i:05d}", "num_records": n,
                   "num_bytes": 10 * n, "sha256": f"{split}{i}"}
                  for i, n in enumerate(records.get(split, []))]
        splits[split] = {"num_records": sum(records.get(split, [])),
                         "num_bytes": 10 * sum(records.get(split, [])), "shards": shards}
    manifest = {
        "name": "images", "splits": splits, "features": {"image": {"dtype": "string"}},
        "label_vocab": ["cat", "dog"], "preprocessing": {"image_size": 16},
        "label_counts": {split: {"cat": sum(records.get(split, []))}
                         for split in contract.SPLITS},
        "inputs": inputs, "versions": {"tensorflow": f"2.{version}"},
        "rejected": {"count": sum(map(len, rejected.values())),
                     "by_reason": {r: len(k) for r, k in sorted(rejected.items())},
                     "examples": {r: [{"key": key, "message": "m"} for key in sorted(k)[:3]]
                                  for r, k in sorted(rejected.items())}},
        "dataset_version": version,
    }
    manifest["history"] = [versions.history_entry(
        version, manifest, versions.key_index_relpath(version),
        versions.rejected_relpath(version))]
    return manifest


V1 = _manifest(1, {"train": [3, 2], "test": [1]}, {"empty_file": ["b", "d"]}, 8, "images")
V2 = _manifest(2, {"train": [4], "validation": [1]},
               {"empty_file": ["a", "c", "e"], "label_not_in_dataset": ["z"]}, 9, "images-v2")


def test_the_first_version_keeps_the_usual_names():
    assert versions.rejected_relpath(1) == "errors/rejected.jsonl"
    assert versions.shard_prefix("images", 1) == "images"
    assert versions.rejected_relpath(2) == "errors/rejected-v00002.jsonl"
    assert versions.shard_prefix("images", 2) == "images-v2"
    assert versions.key_index_relpath(12) == "keys/keys-v00012.txt"


def test_the_history_entry_says_what_the_version_added():
    assert V2["history"] == [{
        "version": 2, "inputs": 9, "written": {"train": 4, "validation": 1, "test": 0},
        "rejected": 4,
        "shards": ["train/images-v2-train-00000", "validation/images-v2-validation-00000"],
        "keys": "keys/keys-v00002.txt", "rejected_file": "errors/rejected-v00002.jsonl"}]


def test_merge_lists_old_shards_then_new_and_sums_every_count():
    merged = versions.merge(V1, V2)
    assert [s["path"] for s in merged["splits"]["train"]["shards"]] == [
        "train/images-train-00000", "train/images-train-00001", "train/images-v2-train-00000"]
    assert {split: merged["splits"][split]["num_records"] for split in contract.SPLITS} == {
        "train": 9, "validation": 1, "test": 1}
    assert merged["splits"]["train"]["num_bytes"] == 90
    assert merged["label_counts"]["train"] == {"cat": 9}
    assert merged["inputs"] == 17
    assert merged["rejected"]["count"] == 6
    assert merged["rejected"]["by_reason"] == {"empty_file": 5, "label_not_in_dataset": 1}
    # The examples stay the first three by key of all versions together.
    assert [e["key"] for e in merged["rejected"]["examples"]["empty_file"]] == ["a", "b", "c"]
    assert [entry["version"] for entry in merged["history"]] == [1, 2]
    assert merged["dataset_version"] == 2
    assert merged["versions"] == V2["versions"]  # the libraries of the latest run


def test_merge_leaves_the_previous_manifest_as_it_was():
    before = json.dumps(V1, sort_keys=True)
    versions.merge(V1, V2)
    assert json.dumps(V1, sort_keys=True) == before


def test_merge_refuses_examples_of_other_features():
    with pytest.raises(ValueError, match="features differ"):
        versions.merge(V1, {**V2, "features": {"image": {"dtype": "int64"}}})


def test_a_dataset_without_key_index_cannot_be_appended_to():
    with pytest.raises(ValueError, match="rebuild it once with --overwrite"):
        versions.DatasetVersion.after({"splits": {}}).held_key_files()


def test_key_index_round_trip(tmp_path):
    keys = ["b/2.jpg", "a/1.jpg", 'odd "name"\nwith a line break.png']
    path = versions._write_key_index(keys, str(tmp_path / "keys.txt"))
    assert versions.read_key_index(path) == set(keys)
    with open(path) as f:
        assert [json.loads(line) for line in f] == sorted(keys)
    assert versions._write_key_index([], str(tmp_path / "none.txt")) is None
    assert not (tmp_path / "none.txt").exists()


def test_read_manifest_reads_the_published_manifest(tmp_path):
    manifest = {"dataset_version": 1, "name": "images"}
    (tmp_path / contract.MANIFEST_FILENAME).write_text(contract.dumps_manifest(manifest))
    assert versions.read_manifest(str(tmp_path)) == manifest


def test_read_manifest_missing_says_job_did_not_finish(tmp_path):
    with pytest.raises(FileNotFoundError, match="did the ETL job finish"):
        versions.read_manifest(str(tmp_path))
