"""Unit tests of etl/core/shards/placement.py: shard planning and the deterministic shard writer."""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import itertools
import json
import os
from typing import NamedTuple

import apache_beam as beam
import pytest
import tensorflow as tf
from apache_beam.testing.test_pipeline import TestPipeline

from etl.core.run import resume
from etl.core.shards import placement as sharding
from etl.core.shards.files import (
    DEFAULT_GZIP_LEVEL,
    BlockWriter,
    ShardFormat,
    ShardWriter,
)
from etl.core.transform import examples
from reader.format import contract

# Never the plain DirectRunner: it first tries to download Prism, which stalls offline.
RUNNER = "apache_beam.runners.portability.fn_api_runner.FnApiRunner"
NAME = "images"


# --- plan_num_shards ------------------------------------------------------------------

@pytest.mark.parametrize(("num_records", "num_bytes", "target", "num_shards", "expected"), [
    (0, 0, 100, None, 0),          # empty split: no shard at all
    (0, 0, 100, 4, 0),             # ... even with an explicit count
    (-1, 0, 100, None, 0),
    (1, 0, 100, None, 1),          # at least one shard
    (100, 50, 100, None, 1),       # ceil(0.5)
    (100, 100, 100, None, 1),      # exactly one target
    (100, 101, 100, None, 2),      # ceil(1.01)
    (100, 1001, 100, None, 11),
    (10, 10**9, 100, None, 10),    # capped at the record count
    (5, 10**9, 100, 3, 3),         # explicit count overrides the target size
    (100, 1, 100, 7, 7),
    (2, 0, 100, 4, 2),             # explicit count capped at the record count
    (3, 300, 0, 2, 2),             # target unused (and unchecked) with an explicit count
])
def test_plan_num_shards_cases(num_records, num_bytes, target, num_shards, expected):
    assert sharding.plan_num_shards(num_records, num_bytes, target, num_shards) == expected


@pytest.mark.parametrize("num_shards", [0, -3])
def test_plan_num_shards_rejects_non_positive_num_shards(num_shards):
    with pytest.raises(ValueError, match=f"--num_shards must be >= 1, got {num_shards}"):
        sharding.plan_num_shards(10, 100, 100, num_shards)


@pytest.mark.parametrize("target", [0, -1])
def test_plan_num_shards_rejects_non_positive_target(target):
    with pytest.raises(ValueError, match=f"Target shard size must be >= 1 byte, got {target}"):
        sharding.plan_num_shards(10, 100, target)


@pytest.mark.parametrize("level", [-1, 10, 1.5, True, "6"])
def test_shard_writer_rejects_a_gzip_level_outside_0_to_9(level):
    with pytest.raises(ValueError, match="--gzip_level must be an integer from 0"):
        ShardFormat(gzip_level=level)


# --- shard_of / order_in_shard --------------------------------------------------------

def test_shard_of_is_shard_hash_modulo_count():
    digest = hashlib.sha256(b"shard\x00cat/1.png").digest()
    assert sharding.shard_of("cat/1.png", 7) == int.from_bytes(digest[:8], "big") % 7


def test_order_in_shard_uses_order_salt():
    digest = hashlib.sha256(b"order\x00cat/1.png").digest()
    assert sharding.order_in_shard("cat/1.png") == int.from_bytes(digest[:8], "big")


# --- WriteShardGroups -----------------------------------------------------------------

class KeyedExample(NamedTuple):
    """A unit that is one serialized example (the simplest thing to shard)."""

    split: str
    key: str
    serialized: bytes


class _WriteExamples(beam.DoFn):
    """The simplest shard writer: the shard's examples in in-shard order."""

    def __init__(self, output_dir: str, gzip_level: int) -> None:
        self._output_dir = output_dir
        self._gzip_level = gzip_level

    def process(self, element, num_shards):
        (split, shard), units = element
        relpath = sharding.pending_relpath(NAME, split, shard)
        with ShardWriter(os.path.join(self._output_dir, relpath),
                         ShardFormat(gzip_level=self._gzip_level)) as writer:
            for unit in sorted(units, key=lambda u: sharding.shard_sort_key(u.key)):
                writer.write(unit.serialized)
        yield sharding.ShardResult.of(split, shard, relpath, writer)


def _plan(examples_: list[KeyedExample], num_shards=None, target_shard_bytes=1 << 30):
    """(split, num_shards) from the examples' exact sizes."""
    totals = collections.defaultdict(lambda: [0, 0])
    for example in examples_:
        totals[example.split][0] += 1
        totals[example.split][1] += len(example.serialized)
    return [(split, sharding.plan_num_shards(n, b, target_shard_bytes, num_shards))
            for split, (n, b) in sorted(totals.items())]


def _example(split: str, key: str) -> KeyedExample:
    return KeyedExample(split, key, examples.serialize_example(
        {"key": key, "image": key.encode() * 3 + b"\x00"}))


def _records() -> list[KeyedExample]:
    train = [_example("train", f"cat/{i:03d}.png") for i in range(35)]
    test = [_example("test", f"dog/{i:03d}.png") for i in range(15)]
    return train + test


def _write(records: list[KeyedExample], output_dir: str, entries_path: str,
           num_shards: int | None = None, target_shard_bytes: int = 1 << 30,
           gzip_level: int = DEFAULT_GZIP_LEVEL) -> list[dict]:
    """Runs WriteShardGroups; returns its entries sorted by (split, index)."""

    def dump(entries: list[sharding.ShardEntry]) -> None:
        with open(entries_path, "w") as f:
            json.dump([dataclasses.asdict(entry) for entry in entries], f)

    with TestPipeline(runner=RUNNER) as p:
        plan = p | "Plan" >> beam.Create(_plan(records, num_shards, target_shard_bytes))
        units = p | beam.Create(records)
        results, _, _ = ((units, plan) | sharding.WriteShardGroups(
            write_shard=_WriteExamples(output_dir, gzip_level)))
        entries = results | sharding.FinalizeShards(output_dir, NAME)
        _ = entries | beam.combiners.ToList() | beam.Map(dump)
    with open(entries_path) as f:
        return sorted(json.load(f), key=lambda e: (e["split"], e["index"]))


def _read_shard(path: str) -> list[bytes]:
    dataset = tf.data.TFRecordDataset(path, compression_type="GZIP")
    return [record.numpy() for record in dataset]


def _files_under(root: str) -> dict[str, bytes]:
    """The shard files under ``root``, not the progress a run keeps while it runs
    (``etl.core.run.resume``; the finalize step records its renames there)."""
    found = {}
    for folder, _, names in os.walk(root):
        if os.path.relpath(folder, root).split(os.sep)[0] == resume.PROGRESS_DIRNAME:
            continue
        for name in names:
            path = os.path.join(folder, name)
            with open(path, "rb") as f:
                found[os.path.relpath(path, root).replace(os.sep, "/")] = f.read()
    return found


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    """WriteShardGroups, 4 shards, on 35 train + 15 test records: (out, entries)."""
    out = str(tmp_path_factory.mktemp("shards"))
    entries = _write(_records(), out, str(tmp_path_factory.mktemp("e") / "entries.json"),
                     num_shards=4)
    return out, entries


def test_write_shards_indices_are_contiguous(written):
    _, entries = written
    by_split = collections.defaultdict(list)
    for entry in entries:
        by_split[entry["split"]].append(entry["index"])
    assert sorted(by_split) == ["test", "train"]
    for split, indices in by_split.items():
        assert indices == list(range(len(indices))), split
        assert 1 <= len(indices) <= 4


def test_write_shards_names_follow_contract(written):
    _, entries = written
    counts = collections.Counter(entry["split"] for entry in entries)
    for entry in entries:
        assert entry["path"] == contract.shard_relpath(
            NAME, entry["split"], entry["index"], counts[entry["split"]])


def test_write_shards_entries_have_exactly_the_documented_fields(written):
    _, entries = written
    for entry in entries:
        assert sorted(entry) == ["index", "num_bytes", "num_records", "path",
                                 "record_index", "sha256", "split"]
        assert entry["record_index"] is None  # GZIP shards have no record index


def test_write_shards_num_records_sum_per_split(written):
    _, entries = written
    totals = collections.Counter()
    for entry in entries:
        assert entry["num_records"] >= 1
        totals[entry["split"]] += entry["num_records"]
    assert totals == {"train": 35, "test": 15}


def test_write_shards_sha256_and_size_match_files(written):
    out, entries = written
    for entry in entries:
        with open(os.path.join(out, entry["path"]), "rb") as f:
            data = f.read()
        assert entry["sha256"] == hashlib.sha256(data).hexdigest()
        assert entry["num_bytes"] == len(data)


def test_write_shards_writes_only_the_listed_files(written):
    out, entries = written
    assert sorted(_files_under(out)) == sorted(entry["path"] for entry in entries)


def test_write_shards_files_hold_every_record_once(written):
    out, entries = written
    records = [r for e in entries for r in _read_shard(os.path.join(out, e["path"]))]
    assert sorted(records) == sorted(example.serialized for example in _records())


def test_write_shards_shard_members_follow_shard_hash(written):
    out, entries = written
    by_key = {example.serialized: example for example in _records()}
    for entry in entries:
        members = [by_key[r] for r in _read_shard(os.path.join(out, entry["path"]))]
        assert {m.split for m in members} == {entry["split"]}
        # Every record of one file has the same provisional shard among the 4.
        assert len({sharding.shard_of(m.key, 4) for m in members}) == 1


def test_write_shards_orders_records_inside_a_shard(written):
    out, entries = written
    key_of = {example.serialized: example.key for example in _records()}
    for entry in entries:
        keys = [key_of[r] for r in _read_shard(os.path.join(out, entry["path"]))]
        assert keys == sorted(keys, key=lambda k: (sharding.order_in_shard(k), k))
        assert len(keys) == entry["num_records"]


def test_write_shards_rerun_is_byte_identical(written, tmp_path):
    out, entries = written
    again = str(tmp_path / "again")
    # Different input order: placement depends on keys only.
    rerun_entries = _write(list(reversed(_records())), again, str(tmp_path / "e.json"),
                           num_shards=4)
    assert rerun_entries == entries
    assert _files_under(again) == _files_under(out)


def _keys_in_provisional_shards(wanted: set[int], num_shards: int, count: int
                                ) -> list[str]:
    """At least ``count`` keys, whose provisional shards among ``num_shards`` are
    exactly ``wanted``."""
    keys: list[str] = []
    for i in itertools.count():
        key = f"bird/{i}.png"
        if sharding.shard_of(key, num_shards) in wanted:
            keys.append(key)
        if len(keys) >= count and {sharding.shard_of(k, num_shards) for k in keys} == wanted:
            return keys
    raise AssertionError("unreachable")


@pytest.mark.parametrize("provisional", [{0, 1}, {0}, {1}])
def test_write_shards_two_record_split_never_writes_empty_files(tmp_path, provisional):
    # 2 records, --num_shards=4: the plan caps at 2 shards, and both keys may share one.
    keys = _keys_in_provisional_shards(provisional, 2, 2)
    assert len(keys) == 2
    out = str(tmp_path / "out")
    entries = _write([_example("validation", k) for k in keys], out,
                     str(tmp_path / "e.json"), num_shards=4)
    num_files = len(provisional)
    assert [e["path"] for e in entries] == [
        contract.shard_relpath(NAME, "validation", i, num_files) for i in range(num_files)]
    assert [e["num_records"] for e in entries] == [2 // num_files] * num_files
    assert sorted(_files_under(out)) == [e["path"] for e in entries]
    for entry in entries:
        assert len(_read_shard(os.path.join(out, entry["path"]))) == entry["num_records"]


def test_write_shards_renumbers_around_empty_provisional_shards(tmp_path):
    # 6+ records, 4 shards, provisional shards 0 and 2 empty: files 0 and 1 of 2.
    keys = _keys_in_provisional_shards({1, 3}, 4, 6)
    out = str(tmp_path / "out")
    entries = _write([_example("test", k) for k in keys], out, str(tmp_path / "e.json"),
                     num_shards=4)
    expected = [
        (f"test/images-test-0000{i}-of-00002.tfrecord.gz",
         sum(1 for k in keys if sharding.shard_of(k, 4) == provisional))
        for i, provisional in enumerate((1, 3))
    ]
    assert [(e["path"], e["num_records"]) for e in entries] == expected
    assert sorted(_files_under(out)) == [path for path, _ in expected]


def test_write_shards_target_size_sets_shard_count(tmp_path):
    records = _records()[:35]  # the train split
    total = sum(len(r.serialized) for r in records)
    out = str(tmp_path / "out")
    entries = _write(records, out, str(tmp_path / "e.json"),
                     target_shard_bytes=total // 2 + 1)  # ceil → exactly 2 shards
    assert len({sharding.shard_of(r.key, 2) for r in records}) == 2
    assert [e["path"] for e in entries] == [
        contract.shard_relpath(NAME, "train", i, 2) for i in range(2)]


def test_gzip_level_changes_only_the_compression(tmp_path, written):
    # Level 0 (stored) and level 9 hold the same records in the same order as the
    # default; level 0 files are GZIP streams larger than their default-level twins.
    default_out, default_entries = written
    for level in (0, 9):
        out = str(tmp_path / f"level{level}")
        entries = _write(_records(), out, str(tmp_path / f"e{level}.json"), num_shards=4,
                         gzip_level=level)
        assert [e["path"] for e in entries] == [e["path"] for e in default_entries]
        for entry, default in zip(entries, default_entries, strict=True):
            path = os.path.join(out, entry["path"])
            with open(path, "rb") as f:
                assert f.read(2) == b"\x1f\x8b"  # the GZIP magic number
            assert _read_shard(path) == _read_shard(os.path.join(default_out,
                                                                 default["path"]))
            if level == 0:
                assert entry["num_bytes"] > default["num_bytes"]


def _varied_records(n: int) -> list[bytes]:
    return [hashlib.sha256(str(i).encode()).digest() * (1 + i % 50) for i in range(n)]


def test_block_writer_file_equals_writing_every_record_on_one_thread(tmp_path):
    import concurrent.futures

    records = _varied_records(1000)
    with ShardWriter(str(tmp_path / "one.tfrecord.gz"), ShardFormat(gzip_level=6)) as direct:
        for record in records:
            direct.write(record)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        with ShardWriter(str(tmp_path / "blocks.tfrecord.gz"), ShardFormat(gzip_level=6)) as writer:
            with BlockWriter(writer, pool) as blocks:
                for first in range(0, len(records), 37):
                    blocks.write(records[first:first + 37])
                blocks.write([])
    assert writer.num_records == direct.num_records == len(records)
    assert writer.sha256 == direct.sha256
    read = [r.numpy() for r in tf.data.TFRecordDataset(
        str(tmp_path / "blocks.tfrecord.gz"), compression_type="GZIP")]
    assert read == records


def test_block_writer_raises_the_error_of_a_block_and_keeps_no_file(tmp_path):
    import concurrent.futures

    path = tmp_path / "bad.tfrecord.gz"
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        with pytest.raises(TypeError):
            with ShardWriter(str(path), ShardFormat(gzip_level=6)) as writer:
                with BlockWriter(writer, pool) as blocks:
                    blocks.write([b"fine", None])  # type: ignore[list-item]
                    blocks.write([b"never reached"])
    assert not os.listdir(tmp_path)


@pytest.mark.parametrize("level", [0, 6])
def test_shard_writer_file_inflates_to_tensorflows_own_tfrecord_framing(tmp_path, level):
    import gzip

    records = [*_varied_records(300), b""]
    with ShardWriter(str(tmp_path / "ours.tfrecord.gz"), ShardFormat(gzip_level=level)) as writer:
        writer.write_all(records)
    with tf.io.TFRecordWriter(str(tmp_path / "tf.tfrecord")) as reference:
        for record in records:
            reference.write(record)
    ours = (tmp_path / "ours.tfrecord.gz").read_bytes()
    assert ours[:2] == b"\x1f\x8b"  # a GZIP stream
    assert gzip.decompress(ours) == (tmp_path / "tf.tfrecord").read_bytes()
