"""Shard files: how one shard's records are framed, compressed and written, and its
record index beside it.

A shard is written whole by one worker, in the order its records are given, and
appears only once complete (``etl.core.io.storage.write``). With ``--compression=gzip``
(the default) the file is a GZIP stream at ``gzip_level`` 0-9 of TFRecord-framed
records (``reader.format.record_index.frames``), framed and deflated a block at a time,
at levels 1-6 by ISA-L (``isal``; :func:`deflate_level`), at 7-9 by zlib. Level 0
keeps the GZIP container (every reader reads it unchanged) and stores the records,
through Python's ``gzip``; it is the image job's default for encoded images, which
deflate barely shrinks (``etl.images.shards.default_gzip_level``). With
``--compression=none`` the records are written as they are, and the writer also
writes the shard's record index (``contract.index_relpath``: each record's offset and
length, known as it is written, so no second pass), which lets readers without
TensorFlow seek to any record (``reader.records``).
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import gzip
from collections.abc import Sequence
from typing import Any

import numpy as np

from etl.core.io import storage
from etl.core.run import fault_injection
from reader.format import contract, record_index
from reader.format.contract import FileFacts

DEFAULT_GZIP_LEVEL = 6  # zlib's Z_DEFAULT_COMPRESSION.
# Small blocks of frames are gathered into chunks this big before they are deflated
# (the GIL released for each); larger blocks are deflated as they come.
DEFLATE_CHUNK_BYTES = 1 << 20


def deflate_level(gzip_level: int) -> int | None:
    """ISA-L's level for zlib's ``gzip_level``: 1-3 → 1, 4-6 → 3; None for 0 (stored)
    and 7-9, which Python's ``gzip`` (zlib) writes.

    ISA-L writes the same GZIP format as zlib several times faster, which made zlib's
    deflate the largest part of the time-series job (``python -m scripts.benchmarks
    deflate``; docs/BENCHMARKS.md). At the default 6 it deflates at its level 3, its
    smallest: overlapping windows (``--shift`` well below ``--window_size``) repeat
    most of each window, which its levels 1 and 2 find less of. Its bytes are its
    own: the same for a given ``isal`` version (pinned in setup.py, recorded in the
    manifest's ``versions``) and the same records, not zlib's. Levels 7-9 ask for size
    over speed and stay zlib's, as do their bytes.
    """
    check_gzip_level(gzip_level)
    if gzip_level == 0 or gzip_level >= 7:
        return None
    return 1 if gzip_level <= 3 else 3


def check_gzip_level(level: int) -> int:
    """``level`` if it is a zlib compression level (0-9), else ValueError."""
    if isinstance(level, bool) or not isinstance(level, int) or not 0 <= level <= 9:
        raise ValueError(f"--gzip_level must be an integer from 0 (store) to 9 "
                         f"(smallest), got {level!r}.")
    return level


@dataclasses.dataclass(frozen=True)
class ShardFormat:
    """How shard files are written: ``compression`` (``contract.COMPRESSIONS``) and,
    for GZIP, the zlib level."""

    compression: str = contract.GZIP
    gzip_level: int = DEFAULT_GZIP_LEVEL

    def __post_init__(self) -> None:
        contract.check_compression(self.compression)
        check_gzip_level(self.gzip_level)

    @property
    def indexed(self) -> bool:
        """Whether each shard has a record index beside it (uncompressed shards)."""
        return self.compression == contract.NO_COMPRESSION


class ShardWriter:
    """Writes one shard's records, in the order given, as a TFRecord file (GZIP or
    uncompressed, as ``shard_format`` says), and an uncompressed shard's record index.

    Use as a context manager: the file appears at ``path`` only when the block ends
    without an error (``storage.write``); with no record written it is not kept at
    all (``num_records`` 0, ``sha256`` None). The sha256 and size are those of the
    file's bytes, hashed as they are written; ``index`` holds the record index's
    (None without one).
    """

    def __init__(self, path: str, shard_format: ShardFormat) -> None:
        self.path = path
        self._format = shard_format
        self.num_records = 0
        self.num_bytes = 0
        self.sha256: str | None = None
        self.index: FileFacts | None = None
        # "<offset> <length>" of each record written, for the record index.
        self._index_lines: list[str] = []
        self._offset = 0

    def __enter__(self) -> ShardWriter:
        self._writing = storage.write(self.path)
        self._file = self._writing.__enter__()
        self._gzip = None
        if self._format.indexed:
            sink: Any = self._file
        else:
            # No file name and mtime 0 in the GZIP header: the bytes depend on the
            # records and the level only.
            self._gzip = sink = _gzip_stream(self._file, self._format.gzip_level)
        self._records = FrameChunks(sink)
        return self

    def write(self, serialized: bytes) -> None:
        self.write_all([serialized])

    def write_all(self, records: Sequence[bytes]) -> None:
        """Appends ``records``, in order: framed a block at a time
        (``record_index.frames``), not ``tf.io.TFRecordWriter``, which releases the GIL
        for every record and must win it back from the shard step's other threads
        each time, while a block framed here lets the file's deflate release the GIL
        once per chunk."""
        if not records:
            return
        fault_injection.check_write_budget(sum(map(len, records)), self._file.path)
        self._records.write(record_index.frames(records), [len(r) for r in records])
        if self._format.indexed:
            for serialized in records:
                length = len(serialized) + contract.RECORD_FRAMING_BYTES
                self._index_lines.append(f"{self._offset} {length}\n")
                self._offset += length
        first = self.num_records == 0
        self.num_records += len(records)
        if first:
            fault_injection.pause_point(fault_injection.SHARD_WRITING)

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        try:
            self._records.flush()
            if self._gzip is not None:
                self._gzip.close()  # ends the GZIP stream
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
            if self._format.indexed:
                self.index = self._write_index()
            fault_injection.pause_point(fault_injection.SHARD_WRITTEN)

    def _write_index(self) -> FileFacts:
        with storage.write(contract.index_relpath(self.path)) as index:
            index.write("".join(self._index_lines).encode("ascii"))
        return FileFacts(index.size, index.sha256)


def _gzip_stream(file: Any, gzip_level: int) -> Any:
    """A GZIP writer onto ``file``: ISA-L's deflate at its ``deflate_level``, else
    Python's ``gzip`` (stored blocks at level 0, which ISA-L's level 0, a fast
    deflate, would not keep)."""
    isal_level = deflate_level(gzip_level)
    if isal_level is None:
        return gzip.GzipFile(filename="", mode="wb", compresslevel=gzip_level,
                             fileobj=file, mtime=0)
    from isal import igzip

    return igzip.IGzipFile(filename="", mode="wb", compresslevel=isal_level,
                           fileobj=file, mtime=0)


class FrameChunks:
    """Hands ``sink`` a stream of TFRecord frames in the chunks ``io.BufferedWriter``
    (``DEFLATE_CHUNK_BYTES``) would, had each frame been written to it on its own:
    as many whole frames as fit in a chunk, and a frame larger than a chunk alone.

    ISA-L's deflate output depends on how its input is cut, so the chunks must not
    depend on how the records were blocked: a shard's bytes are then those of its
    records alone (and those of writing them one at a time). A block of frames is
    cut with one search per chunk, not a Python step per frame."""

    def __init__(self, sink: Any, chunk_bytes: int = DEFLATE_CHUNK_BYTES) -> None:
        self._sink = sink
        self._chunk_bytes = chunk_bytes
        self._pending = bytearray()

    def write(self, frames: bytes, lengths: Sequence[int]) -> None:
        """Appends ``frames``: frames back to back, of records ``lengths`` long."""
        ends = np.cumsum(np.asarray(lengths, np.int64) + contract.RECORD_FRAMING_BYTES)
        view = memoryview(frames)
        start = first = 0
        while first < len(ends):
            room = self._chunk_bytes - len(self._pending)
            fits = int(np.searchsorted(ends, start + room, side="right"))
            if fits > first:  # Frames first..fits-1 fill the chunk further.
                end = int(ends[fits - 1])
                self._pending += view[start:end]
                start, first = end, fits
                continue
            self.flush()  # The next frame does not fit: the chunk is done.
            end = int(ends[first])
            if end - start > self._chunk_bytes:  # A frame larger than a chunk: alone.
                self._sink.write(bytes(view[start:end]))
                start, first = end, first + 1

    def flush(self) -> None:
        """Hands ``sink`` the chunk begun, if any."""
        if self._pending:
            self._sink.write(bytes(self._pending))
            self._pending.clear()


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
