"""etl/core/dead_letters.py: Rejection and the errors/rejected.jsonl writer."""

from __future__ import annotations

import json
import os

import apache_beam as beam
import pytest
from apache_beam.testing.test_pipeline import TestPipeline

from etl.core import dead_letters
from etl.core.dead_letters import Rejection

# Never the plain DirectRunner: it first tries to download Prism, which stalls offline.
RUNNER = "apache_beam.runners.portability.fn_api_runner.FnApiRunner"


def _write(rejections: list[Rejection], output_dir: str, result_path: str,
           **kwargs) -> dict:
    """Runs WriteRejections; returns the summary it produced."""

    def dump(summary: dict) -> None:
        with open(result_path, "w") as f:
            json.dump(summary, f)

    with TestPipeline(runner=RUNNER) as p:
        _ = (p | beam.Create(rejections, reshuffle=False)
             | dead_letters.WriteRejections(output_dir, **kwargs)
             | beam.Map(dump))
    with open(result_path) as f:
        return json.load(f)


def _rejected_path(output_dir: str) -> str:
    return os.path.join(output_dir, "errors", "rejected.jsonl")


def test_rejection_rejects_unknown_reason():
    with pytest.raises(ValueError, match="Unknown rejection reason 'too_blurry'"):
        Rejection(key="k", source="s", reason="too_blurry", message="m")


@pytest.mark.parametrize("reason", dead_letters.REASONS)
def test_rejection_accepts_every_registered_reason(reason):
    assert Rejection(key="k", source="s", reason=reason, message="m").reason == reason


def test_rejection_reason_codes_are_stable():
    # Codes are part of the contract: new ones are appended, none renamed or removed.
    assert dead_letters.REASONS[:18] == (
        "unreadable_file", "empty_file", "undecodable_image", "unsupported_format",
        "missing_label", "invalid_label", "invalid_split", "malformed_manifest_row",
        "malformed_row", "missing_series_id", "unparsable_timestamp", "unparsable_value",
        "inconsistent_timestamps", "duplicate_timestamp", "missing_value",
        "series_too_short", "unlabelled_series", "conflicting_label")


def test_rejection_to_json_has_sorted_keys_and_keeps_unicode():
    rejection = Rejection(key="chat/é.png", source="/in/chat/é.png",
                          reason="empty_file", message="File is empty (0 bytes).")
    assert rejection.to_json() == (
        '{"key": "chat/é.png", "message": "File is empty (0 bytes).", '
        '"reason": "empty_file", "source": "/in/chat/é.png"}')


def test_write_rejections_sorts_by_key_and_counts_by_reason(tmp_path):
    rejections = [
        Rejection("dog/b.jpg", "/in/dog/b.jpg", "undecodable_image", "bad"),
        Rejection("a.png", "/in/a.png", "missing_label", "no folder"),
        Rejection("cat/z.png", "/in/cat/z.png", "empty_file", "empty"),
        Rejection("cat/c.png", "/in/cat/c.png", "undecodable_image", "bad"),
    ]
    out = str(tmp_path / "out")
    summary = _write(rejections, out, str(tmp_path / "summary.json"))
    assert summary == {
        "count": 4,
        "by_reason": {"empty_file": 1, "missing_label": 1, "undecodable_image": 2},
        "examples": {"empty_file": [{"key": "cat/z.png", "message": "empty"}],
                     "missing_label": [{"key": "a.png", "message": "no folder"}],
                     "undecodable_image": [{"key": "cat/c.png", "message": "bad"},
                                           {"key": "dog/b.jpg", "message": "bad"}]}}
    assert list(summary["by_reason"]) == sorted(summary["by_reason"])
    with open(_rejected_path(out), encoding="utf-8") as f:
        lines = f.read().splitlines()
    assert [json.loads(line)["key"] for line in lines] == [
        "a.png", "cat/c.png", "cat/z.png", "dog/b.jpg"]
    assert lines[0] == Rejection("a.png", "/in/a.png", "missing_label", "no folder").to_json()


def test_write_rejections_is_independent_of_input_order(tmp_path):
    rejections = [Rejection(f"k{i % 3}", f"/src/{i}", "empty_file", f"m{i}")
                  for i in range(6)]
    first, second = str(tmp_path / "one"), str(tmp_path / "two")
    _write(rejections, first, str(tmp_path / "s1.json"))
    _write(list(reversed(rejections)), second, str(tmp_path / "s2.json"))
    with open(_rejected_path(first), "rb") as a, open(_rejected_path(second), "rb") as b:
        assert a.read() == b.read()


def test_write_rejections_keeps_a_few_examples_per_reason(tmp_path):
    rejections = [Rejection(f"k{i}", f"/src/{i}", "empty_file", "m") for i in range(9)]
    summary = _write(rejections, str(tmp_path / "out"), str(tmp_path / "s.json"))
    assert [e["key"] for e in summary["examples"]["empty_file"]] == ["k0", "k1", "k2"]


def test_write_rejections_with_none_writes_empty_file(tmp_path):
    out = str(tmp_path / "out")
    summary = _write([], out, str(tmp_path / "summary.json"))
    assert summary == {"count": 0, "by_reason": {}, "examples": {}}
    with open(_rejected_path(out), "rb") as f:
        assert f.read() == b""
    assert os.listdir(os.path.join(out, "errors")) == ["rejected.jsonl"]


@pytest.mark.parametrize(("count", "parts"), [(0, 1), (1, 1), (100_000, 1), (100_001, 2),
                                              (250_000, 3)])
def test_num_parts_is_ceil_of_count_over_part_size(count, parts):
    assert dead_letters.num_parts(count) == parts


def test_write_rejections_in_parts_streams_every_line_once_deterministically(tmp_path):
    # 3 rejections per part: 23 rejections go to 8 parts by key hash; the file holds
    # each part sorted by key, parts in order, the same bytes for any input order,
    # and the summary equals the single-part one.
    rejections = [Rejection(f"k{i:02d}", f"/src/{i}", ("empty_file", "missing_label")[i % 2],
                            f"m{i}") for i in range(23)]
    single = str(tmp_path / "single")
    expected_summary = _write(rejections, single, str(tmp_path / "s0.json"))
    outputs = []
    for name, order in (("a", rejections), ("b", rejections[::-1])):
        out = str(tmp_path / name)
        summary = _write(order, out, str(tmp_path / f"{name}.json"), per_part=3)
        assert summary == expected_summary
        assert os.listdir(os.path.join(out, "errors")) == ["rejected.jsonl"]
        with open(_rejected_path(out), "rb") as f:
            outputs.append(f.read())
    assert outputs[0] == outputs[1]
    keys = [json.loads(line)["key"] for line in outputs[0].decode().splitlines()]
    assert sorted(keys) == [r.key for r in rejections]
    expected = sorted((dead_letters.part_of(r, 8), r.key) for r in rejections)
    assert keys == [key for _, key in expected]
    assert len({part for part, _ in expected}) > 1


def test_write_rejections_refuses_empty_parts():
    with pytest.raises(ValueError, match="per_part must be >= 1"):
        dead_letters.WriteRejections("/unused", per_part=0)
