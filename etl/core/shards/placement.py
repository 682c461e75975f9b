"""Deterministic sharding: shard plans, shard files, and the shard steps both jobs end with.

Why not ``beam.io.WriteToTFRecord(num_shards=N)``: it assigns records to shards at
random, so reruns give different files. Here everything derives from the key:

1. per split, the shard count comes from ``--num_shards`` or the split's (estimated)
   serialized bytes divided by the target shard size, and never exceeds the number
   of units a shard is made of (images; runs of windows of one series);
2. a unit's shard is ``stable_hash64(key, "shard") % num_shards`` (an image's key; a
   window run's first window's key);
3. inside a shard, records are ordered by ``(stable_hash64(key, "order"), key)`` of
   their own keys;
4. each shard is written whole by one worker under a *pending* name
   (``<split>/<name>-<split>-pending-SSSSS.tfrecord.gz``, which appears only once
   complete: ``etl.core.io.storage.write``); ``FinalizeShards`` then drops the shards
   that ended with no record (all rejected, or no key hashed there) and renames the
   rest to their contiguous final names ``-SSSSS-of-NNNNN``, so no file is ever
   empty. On an object store each rename is a copy and a delete: two requests per
   shard of up to ``--target_shard_mb`` (docs/RUNNING_AT_SCALE.md weighs them).

Shard files themselves (framing, compression, record index) are written by
``etl.core.shards.files``; the index of an uncompressed shard is renamed with it.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable
from typing import Any

import apache_beam as beam

from etl.core import dead_letters, hashing, singletons
from etl.core.io import storage
from etl.core.run import resume
from etl.core.shards.files import ShardWriter
from reader.format import contract
from reader.format.contract import FileFacts

DEFAULT_TARGET_SHARD_BYTES = 128 * 1024 * 1024
# Tag of a shard step's output of facts about its records (``shard_step.ShardFacts``).
FACTS = "facts"


def plan_num_shards(num_records: int, num_bytes: int, target_shard_bytes: int,
                    num_shards: int | None = None) -> int:
    """Number of shards for one split.

    Args:
        num_records: records in the split.
        num_bytes: total serialized (uncompressed) example bytes in the split.
        target_shard_bytes: desired shard size before compression.
        num_shards: explicit count (``--num_shards``); overrides the target size.

    Returns:
        ``ceil(num_bytes / target)`` or ``num_shards``, at least 1, at most
        ``num_records`` (0 for an empty split).
    """
    if num_records <= 0:
        return 0
    if num_shards is not None:
        if num_shards < 1:
            raise ValueError(f"--num_shards must be >= 1, got {num_shards}.")
        wanted = num_shards
    else:
        if target_shard_bytes < 1:
            raise ValueError(f"Target shard size must be >= 1 byte, got "
                             f"{target_shard_bytes}.")
        wanted = math.ceil(num_bytes / target_shard_bytes)
    return max(1, min(wanted, num_records))


def shard_of(key: str, num_shards: int) -> int:
    """Provisional shard id of ``key`` among ``num_shards``."""
    return hashing.stable_hash64(key, hashing.SHARD_SALT) % num_shards


def order_in_shard(key: str) -> int:
    """Sort key of a record inside its shard."""
    return hashing.stable_hash64(key, hashing.ORDER_SALT)


def shard_sort_key(key: str) -> tuple[int, str]:
    """Total order of records inside a shard: ``(order hash, key)``."""
    return order_in_shard(key), key


def pending_relpath(name: str, split: str, shard: int,
                    compression: str = contract.GZIP) -> str:
    """Where a written shard waits for its final index (relative to the output dir)."""
    return f"{split}/{name}-{split}-pending-{shard:05d}{contract.shard_suffix(compression)}"


@dataclasses.dataclass(frozen=True)
class ShardResult:
    """What a shard step hands ``FinalizeShards``: its pending file (``path`` None
    when no record was written) and the labels of its records."""

    split: str
    shard: int
    path: str | None
    num_records: int
    num_bytes: int
    sha256: str | None
    label_counts: tuple[tuple[str, int], ...] = ()
    index: FileFacts | None = None

    @classmethod
    def of(cls, split: str, shard: int, relpath: str, writer: ShardWriter,
           label_counts: Iterable[tuple[str, int]] = ()) -> ShardResult:
        """The result of ``writer``'s finished shard, written at ``relpath``."""
        return cls(split, shard, relpath if writer.num_records else None,
                   writer.num_records, writer.num_bytes, writer.sha256,
                   tuple(sorted(label_counts)), writer.index)


@dataclasses.dataclass(frozen=True)
class ShardEntry:
    """A final shard file, as the manifest lists it."""

    split: str
    index: int
    path: str
    num_records: int
    num_bytes: int
    sha256: str
    record_index: FileFacts | None = None

    def file_fields(self) -> dict[str, Any]:
        """The fields the manifest's split entry lists for the file, in its order:
        an uncompressed shard's ``index`` is its record index file."""
        fields: dict[str, Any] = {"path": self.path, "num_records": self.num_records,
                                  "num_bytes": self.num_bytes, "sha256": self.sha256}
        if self.record_index is not None:
            fields["index"] = {"path": contract.index_relpath(self.path),
                               "num_bytes": self.record_index.num_bytes,
                               "sha256": self.record_index.sha256}
        return fields


def finalize_shards(results: Iterable[ShardResult], output_dir: str, name: str,
                    compression: str = contract.GZIP) -> list[ShardEntry]:
    """Renames every non-empty pending shard (and its record index) to its contiguous
    final name.

    Per split, the non-empty shards keep the order of their provisional ids and are
    numbered ``0 .. n-1`` of ``n``; empty ones have no file and are dropped.

    Returns:
        The final shards in (split, index) order.

    Raises:
        ValueError: if two results claim the same (split, shard).
    """
    by_split: dict[str, list[ShardResult]] = {}
    seen: set[tuple[str, int]] = set()
    for result in results:
        ident = (result.split, result.shard)
        if ident in seen:
            raise ValueError(f"Shard {ident} was written twice.")
        seen.add(ident)
        if result.num_records:
            by_split.setdefault(result.split, []).append(result)
    entries = []
    renames = []
    for split in contract.SPLITS:
        written = sorted(by_split.get(split, []), key=lambda r: r.shard)
        for index, result in enumerate(written):
            relpath = contract.shard_relpath(name, split, index, len(written), compression)
            renames.append((result.path, relpath))
            if result.index is not None:
                renames.append((contract.index_relpath(result.path),
                                contract.index_relpath(relpath)))
            entries.append(ShardEntry(split, index, relpath, result.num_records,
                                      result.num_bytes, result.sha256, result.index))
    # Recorded first, so that a run resuming this one can undo them.
    resume.record_renames(output_dir, renames)
    for pending, final in renames:
        storage.rename(storage.join(output_dir, pending), storage.join(output_dir, final))
    return entries


class FinalizeShards(beam.PTransform):
    """``ShardResult``s → the final ``ShardEntry``s.

    Runs once, on one worker, after every shard is written: the files are only
    renamed, never read or copied.
    """

    def __init__(self, output_dir: str, name: str, compression: str = contract.GZIP
                 ) -> None:
        super().__init__()
        self._output_dir = output_dir
        self._name = name
        self._compression = compression

    def expand(self, results: beam.PCollection) -> beam.PCollection:
        # ShardEntry, one per non-empty shard
        return results.pipeline | "RenameShards" >> singletons.Once(
            finalize_shards, flat=True, results=beam.pvalue.AsList(results),
            output_dir=self._output_dir, name=self._name, compression=self._compression)


def _shard_key(unit: Any, num_shards: dict[str, int]) -> tuple[tuple[str, int], Any]:
    return (unit.split, shard_of(unit.key, num_shards[unit.split])), unit


class WriteShardGroups(beam.PTransform):
    """``(units, num_shards)`` → pending shard files; units are anything with a
    ``split`` and a ``key``, ``num_shards`` holds ``(split, num_shards)``.

    Each unit goes to provisional shard ``shard_of(key, num_shards[split])``; the
    units of a shard are grouped and handed to ``write_shard``, a job's DoFn from
    ``((split, shard), [unit])`` to that shard's pending file, which emits one
    ``ShardResult``, tagged ``Rejection``s and (tagged ``FACTS``) facts
    about its records (it also gets ``num_shards`` and any ``side_inputs`` as
    keyword side inputs). ``FinalizeShards`` then gives the written shards their
    final names.

    Returns:
        ``(results, rejected, facts)``: the writer's ``ShardResult``s, its
        rejections, and its facts.
    """

    def __init__(self, *, write_shard: beam.DoFn, write_label: str = "WriteShard",
                 side_inputs: dict[str, Any] | None = None) -> None:
        super().__init__()
        self._write_label = write_label
        self._write_shard = write_shard
        self._side_inputs = dict(side_inputs or {})

    def expand(self, inputs: tuple[beam.PCollection, beam.PCollection]
               ) -> tuple[beam.PCollection, ...]:
        units, planned = inputs
        num_shards = beam.pvalue.AsDict(planned)
        written = (
            units
            # ((split, provisional shard), unit)
            | "AssignShards" >> beam.Map(_shard_key, num_shards=num_shards)
            # ((split, provisional shard), [unit])
            | "GroupByShard" >> beam.GroupByKey()
            # ShardResult; Rejections tagged REJECTED; ShardFacts tagged FACTS
            | self._write_label >> beam.ParDo(
                self._write_shard, num_shards=num_shards, **self._side_inputs,
            ).with_outputs(dead_letters.REJECTED, FACTS, main="results")
        )
        return written.results, written[dead_letters.REJECTED], written[FACTS]
