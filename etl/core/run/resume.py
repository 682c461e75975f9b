"""Resuming an interrupted run: what it would produce, and which shards it finished.

A run keeps its progress under ``<output_dir>/progress/`` until its manifest is
published:

* ``fingerprint.json``, written before any shard: what the run will produce (the
  job, every option that shapes the bytes, the code and library versions, a digest
  of the units it was handed and its shard plan). A rerun whose fingerprint is the
  same resumes; any difference starts it clean, with the difference named in one line.
* ``shards/<split>-SSSSS.json``, one per finished shard, written once its pending
  file is complete: the file's size and sha256, its label counts and dead letters,
  and a digest of the shard's inputs (for images, each file's size and mtime). A
  resumed run keeps the shard only if all of it still checks out, the file read
  back and hashed; otherwise the shard is written again.
* ``finalized.json``: the renames to final shard names the run was about to make,
  so that a resumed run can undo them.

Why a digest of listed units and per-file sizes and mtimes, not content hashes:
hashing every input would read all the bytes one more time, which is most of a
run's work on remote storage; a file rewritten in place almost always changes its
size or mtime, and then only its own shard is redone (the analysis never reads
image bytes, and the shard plan is part of the fingerprint).
"""

from __future__ import annotations

import dataclasses
import json
import re
import sys
from collections.abc import Mapping, Sequence
from typing import Any

import apache_beam as beam

from etl.core import singletons
from etl.core.dead_letters import Rejection
from etl.core.io import storage
from etl.core.run import fingerprint
from reader.format import contract
from reader.format.contract import FileFacts

PROGRESS_DIRNAME = "progress"
FINGERPRINT_FILENAME = "fingerprint.json"
SHARD_RECORDS_DIRNAME = "shards"
FINALIZED_FILENAME = "finalized.json"
# Beam counters (namespace dead_letters.METRICS_NAMESPACE) of what a run's shard
# steps kept from the run it resumed, and what they transformed themselves.
SHARDS_KEPT_COUNTER = "shards_kept"
SHARDS_TRANSFORMED_COUNTER = "shards_transformed"
UNITS_TRANSFORMED_COUNTER = "units_transformed"


# A shard file's name as our jobs write it, in a split folder: final
# (``<name>-<split>-00000-of-00003``), pending (``<name>-<split>-pending-00000``), a
# record index beside either, and any of them still being written.
_SPLIT_NAMES = "|".join(map(re.escape, contract.SPLITS))
_SHARD_FILE = re.compile(
    rf"[^/]+-(?:{_SPLIT_NAMES})-(?:pending-\d{{5}}|\d{{5}}-of-\d{{5}})\.tfrecord(?:\.gz)?"
    rf"(?:{re.escape(contract.INDEX_SUFFIX)})?(?:{re.escape(storage.INCOMPLETE_SUFFIX)})?")


def is_shard_file(name: str) -> bool:
    """True for a file name in a split folder that a run of ours writes (what a run
    may delete there); False for anything else, a user's file named otherwise."""
    return _SHARD_FILE.fullmatch(name) is not None


def progress_dir(output_dir: str) -> str:
    return storage.join(output_dir, PROGRESS_DIRNAME)


def _say(line: str) -> None:
    print(f"[resume] {line}", file=sys.stderr, flush=True)


@dataclasses.dataclass(frozen=True)
class ShardRecord:
    """A finished shard as its run recorded it: its pending file, what it holds and
    what it rejected, and the digest of the inputs it was made from."""

    split: str
    shard: int
    path: str
    num_records: int
    num_bytes: int
    sha256: str | None
    label_counts: tuple[tuple[str, int], ...]
    rejections: tuple[Rejection, ...]
    inputs_sha256: str
    # An uncompressed shard's record index (at ``contract.index_relpath(path)``).
    index: FileFacts | None = None
    # The job's facts about each record, in record order (``shard_step.ShardFacts``).
    facts: tuple[dict[str, Any], ...] = ()

    def to_json(self) -> str:
        # The facts are JSON fields already: asdict would deep-copy every one of them,
        # 1.2 s of the shard step's own thread for 20,000 images.
        fields = dataclasses.asdict(dataclasses.replace(self, facts=()))
        fields["facts"] = self.facts
        return json.dumps(fields, sort_keys=True, ensure_ascii=False)

    @classmethod
    def from_json(cls, text: str) -> ShardRecord:
        fields = json.loads(text)
        fields["label_counts"] = tuple((label, count)
                                       for label, count in fields["label_counts"])
        fields["rejections"] = tuple(Rejection(**r) for r in fields["rejections"])
        if fields.get("index") is not None:
            fields["index"] = FileFacts(**fields["index"])
        fields["facts"] = tuple(fields.get("facts", ()))
        return cls(**fields)

    def files(self) -> list[tuple[str, int, str]]:
        """``(relative path, size, sha256)`` of the shard's files (none without a
        record), each to verify before the shard is kept."""
        if self.sha256 is None:
            return []
        found = [(self.path, self.num_bytes, self.sha256)]
        if self.index is not None:
            found.append((contract.index_relpath(self.path), self.index.num_bytes,
                          self.index.sha256))
        return found


def shard_record_path(output_dir: str, split: str, shard: int) -> str:
    return storage.join(progress_dir(output_dir), SHARD_RECORDS_DIRNAME,
                          f"{split}-{shard:05d}.json")


def record_shard(output_dir: str, record: ShardRecord) -> None:
    """Records a finished shard (atomically: a record is whole or absent)."""
    storage.write_text(shard_record_path(output_dir, record.split, record.shard),
                          record.to_json())


def kept_shard(output_dir: str, split: str, shard: int, inputs_sha256: str
               ) -> ShardRecord | None:
    """The recorded shard if it can be kept: recorded from the same inputs, and its
    files (shard and record index, if any) of the recorded size and sha256, read back (on an object
    store one download per kept shard, against reading and transforming all its
    inputs again). Says why not when a recorded shard is redone."""
    text = _read_text(shard_record_path(output_dir, split, shard))
    if text is None:
        return None
    record = ShardRecord.from_json(text)
    why = None
    if record.inputs_sha256 != inputs_sha256:
        why = "an input file changed (size or mtime) since it was written"
    for relpath, size, sha256 in record.files():
        if why is not None:
            break
        file_path = storage.join(output_dir, relpath)
        found = storage.stat(file_path)
        if found is None:
            why = f"{relpath} is missing"
        elif found.size != size:
            why = f"{relpath} does not have its recorded size"
        elif storage.sha256(file_path) != sha256:
            why = f"{relpath} does not have its recorded sha256"
    if why is None:
        return record
    _say(f"{split} shard {shard} is written again: {why}.")
    return None


def _read_text(path: str) -> str | None:
    """The text of ``path``; None if there is no such file."""
    if storage.stat(path) is None:
        return None
    return storage.read_text(path)


def _read_json(path: str) -> Any:
    text = _read_text(path)
    try:
        return None if text is None else json.loads(text)
    except ValueError:
        return None


def record_renames(output_dir: str, renames: Sequence[tuple[str, str]]) -> None:
    """Records the ``(pending, final)`` renames about to be made."""
    storage.write_text(storage.join(progress_dir(output_dir), FINALIZED_FILENAME),
                          json.dumps([list(pair) for pair in renames]))


def _undo_renames(output_dir: str) -> None:
    """Gives shards an earlier run had renamed their pending names back."""
    path = storage.join(progress_dir(output_dir), FINALIZED_FILENAME)
    for pending, final in _read_json(path) or ():
        pending_path = storage.join(output_dir, pending)
        final_path = storage.join(output_dir, final)
        if storage.exists(final_path) and not storage.exists(pending_path):
            storage.rename(final_path, pending_path)
    storage.delete(path)


def _split_files(output_dir: str) -> list[str]:
    """The files under the split folders named like a run's shards, relative to
    ``output_dir``: what a run may delete there (a user's other files stay)."""
    found = []
    for split in contract.SPLITS:
        folder = storage.join(output_dir, split)
        found += [storage.join(split, name) for name in storage.relative_files(folder)
                  if is_shard_file(name)]
    return sorted(found)


def _record_files(output_dir: str) -> list[str]:
    """The paths of the shard records ``output_dir``'s unfinished run left."""
    folder = storage.join(progress_dir(output_dir), SHARD_RECORDS_DIRNAME)
    return [info.path for info in storage.list_files(folder)
            if info.path.endswith(".json")]


def _recorded_paths(output_dir: str) -> set[str]:
    paths = set()
    for path in _record_files(output_dir):
        record = _read_json(path)
        if record and record.get("path"):
            paths.add(record["path"])
            if record.get("index"):
                paths.add(contract.index_relpath(record["path"]))
    return paths


def count_recorded_shards(output_dir: str) -> int:
    """How many finished shards ``output_dir``'s unfinished run has recorded (what a
    rerun with the same input and options may keep)."""
    return len(_record_files(output_dir))


def _clear(output_dir: str, protected: frozenset[str]) -> None:
    for relpath in _split_files(output_dir):
        if relpath not in protected:
            storage.delete(storage.join(output_dir, relpath))
    storage.delete_tree(storage.join(progress_dir(output_dir), SHARD_RECORDS_DIRNAME))
    storage.delete(storage.join(progress_dir(output_dir), FINALIZED_FILENAME))


def start_or_resume(*, output_dir: str, identity: Mapping[str, Any],
                    units: Mapping[str, Any], num_shards: list[tuple[str, int]],
                    protected: frozenset[str] = frozenset()) -> bool:
    """Decides, before any shard is written, whether this run resumes the one that
    left ``output_dir``'s progress: True when their fingerprints are the same.

    Resuming, it undoes an earlier finalize and removes every split-folder file that
    no shard record names (temporary files, shards not recorded); the shard steps
    then check each recorded shard. Otherwise it removes every leftover, says why in
    one line, and writes this run's fingerprint. The ``protected`` files (the shards
    of the published version an append adds to) are never touched.
    """
    new = fingerprint.fingerprint(identity, units, num_shards)
    path = storage.join(progress_dir(output_dir), FINGERPRINT_FILENAME)
    old = _read_json(path)
    why = fingerprint.difference(old, new)
    if why is None:
        _undo_renames(output_dir)
        recorded = _recorded_paths(output_dir)
        for relpath in _split_files(output_dir):
            if relpath not in recorded and relpath not in protected:
                storage.delete(storage.join(output_dir, relpath))
        _say(f"same input and options as the interrupted run in {output_dir}: "
             f"{count_recorded_shards(output_dir)} finished shard(s) recorded, each kept "
             f"if its size and sha256 still verify.")
        return True
    if old is not None or set(_split_files(output_dir)) - protected:
        _say(f"starting clean in {output_dir}: {why}.")
    _clear(output_dir, protected)
    storage.write_text(path, json.dumps(new, sort_keys=True, indent=1))
    return False


class StartOrResume(beam.PTransform):
    """``(units, num_shards)`` → a single bool, True when this run resumes the
    interrupted one (``start_or_resume``); the shard steps wait for it."""

    def __init__(self, output_dir: str, identity: Mapping[str, Any],
                 protected: frozenset[str] = frozenset()) -> None:
        super().__init__()
        self._output_dir = output_dir
        self._identity = dict(identity)
        self._protected = protected

    def expand(self, inputs: tuple[beam.PCollection, beam.PCollection]
               ) -> beam.PCollection:
        units, num_shards = inputs
        return units.pipeline | "CompareFingerprints" >> singletons.Once(
            start_or_resume, output_dir=self._output_dir, identity=self._identity,
            units=singletons.combined(units, "DigestUnits", fingerprint.DigestUnits()),
            num_shards=beam.pvalue.AsList(num_shards), protected=self._protected)


def remove_progress(output_dir: str) -> None:
    """Deletes the progress of a run whose dataset is published."""
    storage.delete_tree(progress_dir(output_dir))
