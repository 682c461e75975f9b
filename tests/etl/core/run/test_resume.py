"""Unit tests of etl/core/run/resume.py and fingerprint.py: the decision a run makes
before writing any shard, on a folder an interrupted run left."""

from __future__ import annotations

import dataclasses
import json
import os

import pytest

from etl.core.run import fingerprint, resume

IDENTITY = {"job": {"kind": "images", "preprocessing": {"jpeg_quality": 95}},
            "code": {"package": "0.1.0"}}
PLAN = [("train", 2), ("test", 1)]


@dataclasses.dataclass(frozen=True)
class Unit:
    split: str
    key: str


def _digest(units: list[Unit]) -> dict:
    digest = fingerprint.DigestUnits()
    accumulator = digest.create_accumulator()
    for unit in units:
        accumulator = digest.add_input(accumulator, unit)
    return digest.extract_output(accumulator)


UNITS = _digest([Unit("train", "a"), Unit("train", "b"), Unit("test", "c")])


def _decide(out, units=UNITS, identity=IDENTITY, protected=frozenset()) -> bool:
    return resume.start_or_resume(output_dir=str(out), identity=identity,
                                  units=units, num_shards=PLAN, protected=protected)


def _write(out, relpath: str, data: bytes = b"x") -> None:
    path = out / relpath
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


def _record(out, split: str, shard: int, relpath: str) -> None:
    resume.record_shard(str(out), resume.ShardRecord(
        split=split, shard=shard, path=relpath, num_records=1, num_bytes=1, sha256="0",
        label_counts=(), rejections=(), inputs_sha256="0"))


def _interrupted(out) -> None:
    """A run that recorded one shard, wrote another unrecorded, and left a temp file."""
    assert not _decide(out)
    _write(out, "train/n-train-pending-00000.tfrecord.gz")
    _record(out, "train", 0, "train/n-train-pending-00000.tfrecord.gz")
    _write(out, "train/n-train-pending-00001.tfrecord.gz")
    _write(out, "test/n-test-pending-00000.tfrecord.gz.incomplete")


def _files(out) -> list[str]:
    return sorted(os.path.relpath(os.path.join(d, n), out)
                  for d, _, names in os.walk(out) for n in names)


def test_unit_digest_ignores_order_and_sees_every_unit():
    units = [Unit("train", "a"), Unit("train", "b"), Unit("test", "c")]
    assert _digest(list(reversed(units))) == UNITS
    digest = fingerprint.DigestUnits()
    halves = [digest.add_input(digest.create_accumulator(), u) for u in units]
    assert digest.extract_output(digest.merge_accumulators(halves)) == UNITS
    assert _digest(units[:2]) != UNITS
    assert _digest([*units[:2], Unit("validation", "c")]) != UNITS


def test_a_fresh_run_writes_its_fingerprint_and_says_nothing(tmp_path, capsys):
    assert not _decide(tmp_path)
    with open(tmp_path / "progress" / "fingerprint.json") as f:
        assert json.load(f) == fingerprint.fingerprint(IDENTITY, UNITS, PLAN)
    assert capsys.readouterr().err == ""


def test_the_same_run_resumes_keeping_only_recorded_shards(tmp_path, capsys):
    _interrupted(tmp_path)
    assert _decide(tmp_path)
    assert "1 finished shard(s) recorded" in capsys.readouterr().err
    assert [f for f in _files(tmp_path) if not f.startswith("progress")] == [
        "train/n-train-pending-00000.tfrecord.gz"]


def test_resuming_undoes_the_renames_of_a_finalize(tmp_path):
    _interrupted(tmp_path)
    os.rename(tmp_path / "train/n-train-pending-00000.tfrecord.gz",
              tmp_path / "train/n-train-00000-of-00001.tfrecord.gz")
    resume.record_renames(str(tmp_path), [("train/n-train-pending-00000.tfrecord.gz",
                                           "train/n-train-00000-of-00001.tfrecord.gz")])
    assert _decide(tmp_path)
    assert (tmp_path / "train/n-train-pending-00000.tfrecord.gz").exists()
    assert not (tmp_path / "train/n-train-00000-of-00001.tfrecord.gz").exists()
    assert not (tmp_path / "progress" / "finalized.json").exists()


def test_a_changed_input_starts_clean_in_one_line(tmp_path, capsys):
    _interrupted(tmp_path)
    capsys.readouterr()
    other = _digest([Unit("train", "a"), Unit("train", "b"), Unit("test", "d")])
    assert not _decide(tmp_path, units=other)
    assert capsys.readouterr().err.splitlines() == [
        (f"[resume] starting clean in {tmp_path}: the input changed (3 units listed "
        f"then, 3 now, or the same number with other keys, labels or splits).")]
    assert _files(tmp_path) == ["progress/fingerprint.json"]


def test_a_changed_option_is_named_with_both_values(tmp_path, capsys):
    _interrupted(tmp_path)
    capsys.readouterr()
    identity = {**IDENTITY, "job": {"kind": "images",
                                    "preprocessing": {"jpeg_quality": 80}}}
    assert not _decide(tmp_path, identity=identity)
    assert capsys.readouterr().err.strip().endswith(
        ": job.preprocessing.jpeg_quality was 95, now 80.")


def test_a_run_of_other_deflate_code_is_not_resumed(tmp_path, capsys):
    """A run interrupted by code that deflated with zlib (no ``isal`` in its
    fingerprint) is not resumed by this code, whose shards would have other bytes."""
    from etl.core.run.fingerprint import library_versions

    _interrupted(tmp_path)
    capsys.readouterr()
    identity = {**IDENTITY, "code": {**IDENTITY["code"],
                                     "isal": library_versions()["isal"]}}
    assert not _decide(tmp_path, identity=identity)
    assert capsys.readouterr().err.strip().endswith(
        f': code.isal was null, now "{library_versions()["isal"]}".')


@pytest.mark.parametrize("same", [True, False])
def test_published_shards_of_an_appended_dataset_are_never_removed(tmp_path, same):
    _interrupted(tmp_path)
    _write(tmp_path, "train/n-train-00000-of-00001.tfrecord.gz", b"version 1")
    protected = frozenset({"train/n-train-00000-of-00001.tfrecord.gz"})
    _decide(tmp_path, units=UNITS if same else _digest([]), protected=protected)
    assert (tmp_path / "train/n-train-00000-of-00001.tfrecord.gz").read_bytes() == (
        b"version 1")


def test_a_shard_record_round_trips_with_its_facts_as_its_json_fields():
    from etl.core.dead_letters import UNDECODABLE_IMAGE, Rejection
    from reader.format.contract import FileFacts

    record = resume.ShardRecord(
        split="train", shard=3, path="train/n-train-pending-00003.tfrecord",
        num_records=2, num_bytes=10, sha256="ab", label_counts=(("cat", 2),),
        rejections=(Rejection("k", "/in/k", UNDECODABLE_IMAGE, "bad"),),
        inputs_sha256="cd", index=FileFacts(4, "ef"),
        facts=({"key": "a", "labels": ["cat"], "phash": "00ff"},
               {"key": "b\u00e9", "labels": [], "blank": True}))
    text = record.to_json()
    # The fields asdict gives, facts included, so records of earlier runs still read.
    assert text == json.dumps(dataclasses.asdict(record), sort_keys=True, ensure_ascii=False)
    assert resume.ShardRecord.from_json(text) == record
