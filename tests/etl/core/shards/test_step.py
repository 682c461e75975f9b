"""Unit tests of etl/core/shards/step.py: the shard-step frame with a toy job."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable, Iterator
from typing import NamedTuple

import apache_beam as beam
import numpy as np
import pytest
import tensorflow as tf
from apache_beam.utils import shared

from etl.core import dead_letters
from etl.core.dead_letters import Rejection
from etl.core.run import resume
from etl.core.shards.files import ShardFormat
from etl.core.shards.placement import ShardResult
from etl.core.shards.step import PrunedTransform, ShardBlock, ShardStep
from reader.format import contract

NAME = "toy"


class Unit(NamedTuple):
    split: str
    key: str
    label: str


class _UpperStep(ShardStep):
    """A toy job: a unit's example is its key upper-cased by the "transform"; keys
    starting with "bad" are rejected; two examples per block."""

    WRITTEN_COUNTER = "toy_written"

    def __init__(self, output_dir: str, shard_format: ShardFormat | None = None) -> None:
        super().__init__(output_dir, NAME, shard_format or ShardFormat(gzip_level=0),
                         shared.Shared())
        # Where TensorFlow would load the transform output from: not the output dir.
        self.transform_dir = os.path.join(output_dir, "staged_transform_output")
        self.loads: list[str] = []
        self.written: list[tuple[ShardResult, dict[str, int]]] = []

    def load_transform(self, transform_fn_dir: str) -> _Upper:
        self.loads.append(transform_fn_dir)
        return _Upper()

    def transform_blocks(self, units: Iterable[Unit], transform: _Upper
                         ) -> Iterator[ShardBlock]:
        ordered = sorted(units, key=lambda u: u.key)
        for first in range(0, len(ordered), 2):
            block = ordered[first:first + 2]
            good = [u for u in block if not u.key.startswith("bad")]
            yield ShardBlock(
                [transform(u.key) for u in good], [u.label for u in good],
                [Rejection(u.key, f"src/{u.key}", dead_letters.MISSING_LABEL, "no label")
                 for u in block if u.key.startswith("bad")])

    def shard_written(self, result: ShardResult, num_shards: dict[str, int],
                      kept: bool) -> None:
        self.written.append((result, num_shards))
        self.kept = [*getattr(self, "kept", []), kept]


class _Upper:
    def __call__(self, key: str) -> bytes:
        return key.upper().encode()


UNITS = [Unit("train", "c", "cat"), Unit("train", "bad1", "cat"), Unit("train", "a", "cat"),
         Unit("train", "b", "dog")]
NUM_SHARDS = {"train": 4}


def _run(step: _UpperStep, units: list[Unit], shard: int = 3, resuming: bool = False
         ) -> list:
    """The step's outputs, a tagged output as ``(tag, value)``."""
    step.setup()
    try:
        return [(o.tag, o.value) if isinstance(o, beam.pvalue.TaggedOutput) else o
                for o in step.process((("train", shard), units), num_shards=NUM_SHARDS,
                                      transform_dir=str(step.transform_dir), resuming=resuming)]
    finally:
        step.teardown()


def _read(path: str) -> list[bytes]:
    return [r.numpy() for r in tf.data.TFRecordDataset(path, compression_type="GZIP")]


@pytest.fixture
def ran(tmp_path) -> tuple[str, _UpperStep, list]:
    step = _UpperStep(str(tmp_path))
    return str(tmp_path), step, _run(step, UNITS)


def test_shard_step_writes_every_blocks_examples_in_order(ran):
    out, _, _ = ran
    path = os.path.join(out, "train", f"{NAME}-train-pending-00003{contract.SHARD_SUFFIX}")
    assert _read(path) == [b"A", b"B", b"C"]


def test_shard_step_emits_the_shards_result_last(ran):
    out, _, outputs = ran
    relpath = f"train/{NAME}-train-pending-00003{contract.SHARD_SUFFIX}"
    with open(os.path.join(out, relpath), "rb") as f:
        data = f.read()
    assert outputs[-1] == ShardResult(
        split="train", shard=3, path=relpath, num_records=3, num_bytes=len(data),
        sha256=hashlib.sha256(data).hexdigest(), label_counts=(("cat", 2), ("dog", 1)))


def test_shard_step_tags_each_rejection_as_a_dead_letter(ran):
    _, _, outputs = ran
    tagged = [o for o in outputs if isinstance(o, tuple)]
    assert tagged == [(dead_letters.REJECTED, Rejection(
        "bad1", "src/bad1", dead_letters.MISSING_LABEL, "no label"))]
    assert len(outputs) == 2


def test_shard_step_loads_the_transform_fn_where_its_side_input_says(ran):
    _, step, _ = ran
    assert step.loads == [os.path.join(step.transform_dir, contract.TRANSFORM_FN_DIRNAME)]


def test_shard_step_loads_the_transform_once_per_handle(tmp_path):
    step = _UpperStep(str(tmp_path))
    _run(step, UNITS[:1], shard=0)
    _run(step, UNITS[2:], shard=1)
    assert len(step.loads) == 1


def test_shard_step_reports_the_written_shard_with_the_plan(ran):
    _, step, outputs = ran
    assert step.written == [(outputs[-1], NUM_SHARDS)]


def test_shard_step_keeps_no_file_for_a_shard_of_rejections(tmp_path):
    step = _UpperStep(str(tmp_path))
    outputs = _run(step, [Unit("train", "bad1", "cat"), Unit("train", "bad2", "cat")])
    assert outputs[-1] == ShardResult("train", 3, None, 0, 0, None, ())
    assert os.listdir(tmp_path / "train") == []


def test_pruned_transform_returns_only_its_output_keys_as_arrays():
    pruned = PrunedTransform(("b",), lambda inputs: {
        "a": tf.constant([1]), "b": inputs["x"] * 2})
    outputs = pruned({"x": tf.constant([1.5, 2.0])})
    assert list(outputs) == ["b"]
    np.testing.assert_array_equal(outputs["b"], np.array([3.0, 4.0], np.float32))


def test_resumed_shard_step_keeps_a_recorded_shard_without_transforming(ran):
    out, _, first = ran
    again = _UpperStep(out)
    assert _run(again, list(reversed(UNITS)), resuming=True) == first
    assert again.loads == [] and again.kept == [True]


def test_a_fresh_run_rewrites_a_recorded_shard(ran):
    out, _, first = ran
    again = _UpperStep(out)
    assert _run(again, UNITS, resuming=False) == first
    assert len(again.loads) == 1 and again.kept == [False]


def test_a_recorded_shard_with_other_inputs_is_written_again(ran, capsys):
    out, _, _ = ran
    again = _UpperStep(out)
    outputs = _run(again, UNITS[:3], resuming=True)
    assert again.kept == [False]
    assert outputs[-1].num_records == 2
    assert "train shard 3 is written again: an input file changed" in capsys.readouterr().err


@pytest.mark.parametrize("damage", ["flip", "truncate", "delete"])
def test_a_recorded_shard_whose_file_changed_is_written_again(ran, damage, capsys):
    out, _, first = ran
    path = os.path.join(out, first[-1].path)
    with open(path, "rb") as f:
        data = bytearray(f.read())
    if damage == "delete":
        os.remove(path)
    else:
        data = data[:-1] if damage == "truncate" else data
        data[len(data) // 2] ^= 1 if damage == "flip" else 0
        with open(path, "wb") as f:
            f.write(data)
    again = _UpperStep(out)
    assert _run(again, UNITS, resuming=True) == first
    assert again.kept == [False]
    why = {"flip": "recorded sha256", "truncate": "recorded size", "delete": "is missing"}
    assert why[damage] in capsys.readouterr().err


def test_the_shard_record_holds_the_result_and_its_rejections(ran):
    out, _, first = ran
    with open(resume.shard_record_path(out, "train", 3)) as f:
        record = resume.ShardRecord.from_json(f.read())
    result = first[-1]
    assert (record.path, record.num_records, record.num_bytes, record.sha256,
            record.label_counts) == (result.path, result.num_records, result.num_bytes,
                                     result.sha256, result.label_counts)
    assert record.rejections == (first[0][1],)


def test_an_uncompressed_shard_is_kept_with_its_index_and_redone_when_the_index_changed(
        tmp_path, capsys):
    out = str(tmp_path)
    uncompressed = ShardFormat(compression=contract.NO_COMPRESSION)
    first = _run(_UpperStep(out, uncompressed), UNITS)
    result = first[-1]
    index_path = os.path.join(out, contract.index_relpath(result.path))
    with open(index_path, "rb") as f:
        index = f.read()
    assert result.path.endswith(".tfrecord") and result.index.num_bytes == len(index)
    assert result.index.sha256 == hashlib.sha256(index).hexdigest()
    kept = _UpperStep(out, uncompressed)
    assert _run(kept, UNITS, resuming=True) == first and kept.kept == [True]
    with open(index_path, "ab") as f:
        f.write(b"0 16\n")
    again = _UpperStep(out, uncompressed)
    assert _run(again, UNITS, resuming=True) == first and again.kept == [False]
    assert "tfrecord.idx does not have its recorded size" in capsys.readouterr().err
