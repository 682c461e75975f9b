"""pipelines/summary.py: the end-of-job summary names what the labels are."""

from __future__ import annotations

import pytest

from pipelines.summary import format_summary


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
