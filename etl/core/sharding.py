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
   complete: ``etl.core.storage.write``); ``FinalizeShards`` then drops the shards
   that ended with no record (all rejected, or no key hashed there) and renames the
   rest to their contiguous final names ``-SSSSS-of-NNNNN``, so no file is ever
   empty. On an object store each rename is a copy and a delete: two requests per
   shard of up to ``--target_shard_mb`` (docs/RUNNING_AT_SCALE.md weighs them).

Files are GZIP (zlib) streams at ``gzip_level`` 0-9 of TFRecord-framed records
(:func:`write_tfrecord`), deflated by Python's ``gzip`` a ``DEFLATE_CHUNK_BYTES``
chunk at a time. Level 0 keeps the GZIP container (every reader reads it unchanged)
and stores the records; it is the image job's default for encoded images, which
deflate barely shrinks (``etl.images.shards.default_gzip_level``).
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import gzip
import io
import math
from collections.abc import Iterable
from typing import Any, BinaryIO

import apache_beam as beam
from apache_beam.io.tfrecordio import _TFRecordUtil

from etl.core import dead_letters, fault_injection, hashing, resume, storage
from reader import contract

DEFAULT_TARGET_SHARD_BYTES = 128 * 1024 * 1024
DEFAULT_GZIP_LEVEL = 6  # zlib's Z_DEFAULT_COMPRESSION.
# Framed records are deflated a chunk at a time, the GIL released for each chunk.
DEFLATE_CHUNK_BYTES = 1 << 20


def check_gzip_level(level: int) -> int:
    """``level`` if it is a zlib compression level (0-9), else ValueError."""
    if isinstance(level, bool) or not isinstance(level, int) or not 0 <= level <= 9:
        raise ValueError(f"--gzip_level must be an integer from 0 (store) to 9 "
                         f"(smallest), got {level!r}.")
    return level


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


def write_tfrecord(out: BinaryIO, record: bytes) -> None:
    """Appends ``record`` to ``out`` in TFRecord framing (length, masked CRC32C, data,
    masked CRC32C: what ``tf.io.TFRecordWriter`` writes and tf.data reads).

    Framed with Beam's private ``_TFRecordUtil`` (Beam's own TFRecord sink uses it),
    not ``tf.io.TFRecordWriter``: that releases the GIL for every record and must
    win it back from the shard step's other threads each time, while framing here
    lets the file's deflate release the GIL once per chunk."""
    _TFRecordUtil.write_record(out, record)


def pending_relpath(name: str, split: str, shard: int) -> str:
    """Where a written shard waits for its final index (relative to the output dir)."""
    return f"{split}/{name}-{split}-pending-{shard:05d}{contract.SHARD_SUFFIX}"


class ShardWriter:
    """Writes one shard's records, in the order given, as a GZIP TFRecord file.

    Use as a context manager: the file appears at ``path`` only when the block ends
    without an error (``storage.write``); with no record written it is not kept at
    all (``num_records`` 0, ``sha256`` None). The sha256 and size are those of the
    file's bytes, hashed as they are written.
    """

    def __init__(self, path: str, gzip_level: int) -> None:
        self.path = path
        self._gzip_level = check_gzip_level(gzip_level)
        self.num_records = 0
        self.num_bytes = 0
        self.sha256: str | None = None

    def __enter__(self) -> ShardWriter:
        self._writing = storage.write(self.path)
        self._file = self._writing.__enter__()
        # No file name and mtime 0 in the GZIP header: the bytes depend on the
        # records and the level only.
        self._gzip = gzip.GzipFile(filename="", mode="wb", compresslevel=self._gzip_level,
                                   fileobj=self._file, mtime=0)
        self._records = io.BufferedWriter(self._gzip, buffer_size=DEFLATE_CHUNK_BYTES)
        return self

    def write(self, serialized: bytes) -> None:
        fault_injection.check_write_budget(len(serialized), self._file.path)
        write_tfrecord(self._records, serialized)
        self.num_records += 1
        if self.num_records == 1:
            fault_injection.pause_point(fault_injection.SHARD_WRITING)

    def write_all(self, records: Iterable[bytes]) -> None:
        for serialized in records:
            self.write(serialized)

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        try:
            self._records.close()  # flushes, then ends the GZIP stream
        except BaseException as e:
            self._writing.__exit__(type(e), e, e.__traceback__)
            raise
        if exc_type is None and self.num_records == 0:
            exc_type, exc, tb = _NoRecord, _NoRecord(), None
        # Completes the file, or (an error, no record) leaves none.
        self._writing.__exit__(exc_type, exc, tb)
        if exc_type is None:
            self.num_bytes = self._file.size
            self.sha256 = self._file.sha256
            fault_injection.pause_point(fault_injection.SHARD_WRITTEN)


class _NoRecord(Exception):
    """Thrown into the file's writer to leave no file for a shard without records."""


class BlockWriter:
    """Writes blocks of records to a ``ShardWriter`` on a background thread, in order.

    A shard step prepares the next block (decode, transform, serialize) while the
    previous one is written: ``ShardWriter`` deflates a chunk at a time with the GIL
    released, so the two overlap on separate cores. One block is in flight at a time, and the
    file's bytes are those of writing every block in turn on one thread. Use as a
    context manager inside the ``ShardWriter`` block: leaving it waits for the block
    in flight, so the file is never closed under a write.
    """

    def __init__(self, writer: ShardWriter, pool: concurrent.futures.Executor) -> None:
        self._writer = writer
        self._pool = pool
        self._in_flight: concurrent.futures.Future | None = None

    def write(self, records: list[bytes]) -> None:
        """Queues ``records`` after the block in flight (raising its error, if any)."""
        self.wait()
        if records:
            self._in_flight = self._pool.submit(self._writer.write_all, records)

    def wait(self) -> None:
        """Blocks until the block in flight is written; raises what writing it raised."""
        in_flight, self._in_flight = self._in_flight, None
        if in_flight is not None:
            in_flight.result()

    def __enter__(self) -> BlockWriter:
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is None:
            self.wait()
        elif self._in_flight is not None:
            concurrent.futures.wait([self._in_flight])


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

    @classmethod
    def of(cls, split: str, shard: int, relpath: str, writer: ShardWriter,
           label_counts: Iterable[tuple[str, int]] = ()) -> ShardResult:
        """The result of ``writer``'s finished shard, written at ``relpath``."""
        return cls(split, shard, relpath if writer.num_records else None,
                   writer.num_records, writer.num_bytes, writer.sha256,
                   tuple(sorted(label_counts)))


@dataclasses.dataclass(frozen=True)
class ShardEntry:
    """A final shard file, as the manifest lists it."""

    split: str
    index: int
    path: str
    num_records: int
    num_bytes: int
    sha256: str

    def file_fields(self) -> dict[str, Any]:
        """The fields the manifest's split entry lists for the file, in its order."""
        return {"path": self.path, "num_records": self.num_records,
                "num_bytes": self.num_bytes, "sha256": self.sha256}


def finalize_shards(results: Iterable[ShardResult], output_dir: str, name: str
                    ) -> list[ShardEntry]:
    """Renames every non-empty pending shard to its contiguous final name.

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
            relpath = contract.shard_relpath(name, split, index, len(written))
            renames.append((result.path, relpath))
            entries.append(ShardEntry(split, index, relpath, result.num_records,
                                      result.num_bytes, result.sha256))
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

    def __init__(self, output_dir: str, name: str) -> None:
        super().__init__()
        self._output_dir = output_dir
        self._name = name

    def expand(self, results: beam.PCollection) -> beam.PCollection:
        return (
            results
            # [ShardResult]
            | "GatherShardResults" >> beam.combiners.ToList()
            # ShardEntry, one per non-empty shard
            | "RenameShards" >> beam.FlatMap(finalize_shards, output_dir=self._output_dir,
                                             name=self._name)
        )


def _shard_key(unit: Any, num_shards: dict[str, int]) -> tuple[tuple[str, int], Any]:
    return (unit.split, shard_of(unit.key, num_shards[unit.split])), unit


class WriteShardGroups(beam.PTransform):
    """``(units, num_shards)`` → final shard files; units are anything with a
    ``split`` and a ``key``, ``num_shards`` holds ``(split, num_shards)``.

    Each unit goes to provisional shard ``shard_of(key, num_shards[split])``; the
    units of a shard are grouped and handed to ``write_shard``, a job's DoFn from
    ``((split, shard), [unit])`` to that shard's pending file, which emits one
    ``ShardResult`` and tagged ``Rejection``s (it also gets ``num_shards`` and any
    ``side_inputs`` as keyword side inputs). ``FinalizeShards`` then gives the
    written shards their final names.

    Returns:
        ``(entries, results, rejected)``: the final ``ShardEntry``s, the writer's
        ``ShardResult``s, and its rejections.
    """

    def __init__(self, output_dir: str, name: str, *, write_shard: beam.DoFn,
                 write_label: str = "WriteShard",
                 side_inputs: dict[str, Any] | None = None) -> None:
        super().__init__()
        self._write_label = write_label
        self._write_shard = write_shard
        self._side_inputs = dict(side_inputs or {})
        self._finalize = FinalizeShards(output_dir, name)

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
            # ShardResult, and Rejections tagged REJECTED
            | self._write_label >> beam.ParDo(
                self._write_shard, num_shards=num_shards, **self._side_inputs,
            ).with_outputs(dead_letters.REJECTED, main="results")
        )
        entries = written.results | "FinalizeShards" >> self._finalize
        return entries, written.results, written[dead_letters.REJECTED]
