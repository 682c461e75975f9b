"""pipelines/summary.py: the end-of-job summary names what the labels are."""

from __future__ import annotations

import pytest

from pipelines.summary import CoresUsed, format_summary


def _manifest(task: str, features: dict, vocab: list[str]) -> dict:
    empty = {"num_records": 0, "num_bytes": 0, "shards": []}
    return {"name": "images", "kind": "images", "task": task, "features": features,
            "label_vocab": vocab, "splits": {s: empty for s in ("train", "validation",
                                                                "test")},
            "rejected": {"count": 0, "by_reason": {}}}


TARGET = {"target": {"kind": "fixed_len", "dtype": "float32", "shape": [2]}}


@pytest.mark.parametrize("task, features, vocab, line", [
    ("classification", {}, ["a", "b"], "images classification, 2 labels;"),
    ("multi_label", {}, ["a", "b", "c"], "images multi_label, 3 labels;"),
    ("multi_label", TARGET, ["a"], "images multi_label, 1 labels, target shape [2];"),
    ("regression", TARGET, [], "images regression, target shape [2];"),
])
def test_summary_names_the_classes_and_targets(task, features, vocab, line):
    assert line in format_summary("/out", _manifest(task, features, vocab), 1.0)


def test_summary_says_where_the_statistics_are_what_is_flagged_and_what_drifted():
    manifest = _manifest("classification", {}, ["a"])
    manifest["statistics"] = {
        "version": 2, "drift": "statistics/v00002/drift.json",
        "drift_over": [f"train vs v00001/train: f{i}" for i in range(7)],
        "flags": {"file": "statistics/v00002/flags.jsonl", "images": 3,
                  "counts": {"dark": 2, "light": 0, "blurry": 1}},
        "anomalies": [{"split": "train", "description": "ENUM_TYPE_UNEXPECTED_STRING_VALUES"
                                                        ": Examples contain values missing "
                                                        "from the schema: png."}]}
    lines = format_summary("/out", manifest, 1.0).splitlines()
    assert "  statistics: statistics/v00002/ (TFDV format), report: report/index.html" in lines
    assert ("  quality flags: 3 image(s) (dark 2, blurry 1); details in "
            "statistics/v00002/flags.jsonl") in lines
    [drift] = [line for line in lines if line.startswith("WARNING: drift")]
    assert drift.startswith("WARNING: drift over threshold in 7 comparison(s): "
                            "train vs v00001/train: f0; ")
    assert drift.endswith("; and 2 more (details in statistics/v00002/drift.json)")
    assert ("WARNING: train: ENUM_TYPE_UNEXPECTED_STRING_VALUES: Examples contain values "
            "missing from the schema: png.") in lines


def test_summary_of_a_dataset_without_statistics_says_nothing_of_them():
    assert "statistics" not in format_summary("/out", _manifest("classification", {}, ["a"]),
                                              1.0)


def test_summary_says_how_many_cores_the_run_kept_busy():
    cores = CoresUsed(cpu_s=7.5, wall_s=5.0, available=2)
    lines = format_summary("/out", _manifest("classification", {}, ["a"]), 5.0,
                           cores=cores).splitlines()
    assert lines[-2:] == ["  wall time: 5.0 s", (
        "  cores: 1.5 busy on average of the 2 this process may use (7.5 s of CPU in 5.0 s)")]
    assert "cores" not in format_summary("/out", _manifest("classification", {}, ["a"]),
                                         5.0)
