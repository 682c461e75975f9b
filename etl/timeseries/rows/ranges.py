"""Input ranges: the read tasks a long-format input is cut into, and their lines.

A text file (CSV, JSON Lines) is cut into byte ranges; a range owns the lines that
*start* inside it. A Parquet file is cut into its row groups. Line numbers
(``<file>:<line>`` in dead letters) come from a first pass that counts the line
breaks of every range (``count_line_breaks``, ``first_line_numbers``).

A line may be up to ``--max_line_mb`` long (``DEFAULT_MAX_LINE_BYTES``, its line break
aside); ``find_long_line`` finds a longer one in a local file before the job runs, a
probe every ``max_line_bytes / 2`` bytes, and ``long_line`` in a range's bytes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import IO

import numpy as np

from etl.core import dead_letters
from etl.core.io import storage
from etl.timeseries.rows.sources import Columns, check_columns

# Bytes of CSV / JSON Lines one read task parses (its lines: those starting inside).
RANGE_BYTES = 32 * 1024 * 1024
# A row's input position: file index × POSITION_FILE_STRIDE + line (or row) number.
POSITION_FILE_STRIDE = 1 << 40

_READ_TAIL_BYTES = 64 * 1024

_MIB = 1024 * 1024
# The longest line (bytes, its line break aside) a job reads by default, and the
# most --max_line_mb may allow: pyarrow's block, which must hold the longest line
# of a range (etl/timeseries/rows/parsing.py), is an int32.
DEFAULT_MAX_LINE_BYTES = 64 * _MIB
MAX_LINE_BYTES_LIMIT = 1024 * _MIB
# What the line-length check reads at a time: a probe first, then the rest of a
# window in which the probe found no line break.
_PROBE_BYTES = 64 * 1024
_SCAN_BYTES = 1024 * 1024


@dataclasses.dataclass(frozen=True)
class InputRange:
    """One read task: bytes ``[start, end)`` of a text file (the lines starting
    there), or one Parquet row group (``start`` = its index, ``end`` = its first
    row's 1-based number)."""

    file_index: int
    range_index: int
    path: str
    start: int
    end: int


def plan_text_ranges(sizes: Sequence[tuple[str, int]], range_bytes: int = RANGE_BYTES
                     ) -> list[InputRange]:
    """Byte ranges of every file (``(path, size)``, in input order)."""
    ranges = []
    for file_index, (path, size) in enumerate(sizes):
        for range_index, start in enumerate(range(0, max(size, 1), range_bytes)):
            ranges.append(InputRange(file_index, range_index, path, start,
                                     min(size, start + range_bytes)))
    return ranges


def plan_parquet_ranges(paths: Sequence[str], columns: Columns) -> list[InputRange]:
    """One range per row group; checks every file's columns first.

    Raises:
        ValueError: naming a file that lacks a needed column.
    """
    import pyarrow.parquet as pq

    ranges = []
    for file_index, path in enumerate(paths):
        with storage.open_read(path) as f:
            metadata = pq.ParquetFile(f).metadata
        check_columns(metadata.schema.to_arrow_schema().names, columns, path)
        first_row = 1
        for group in range(metadata.num_row_groups):
            ranges.append(InputRange(file_index, group, path, group, first_row))
            first_row += metadata.row_group(group).num_rows
    return ranges


def _read_bytes(path: str, start: int, end: int) -> bytes:
    with storage.open_read(path) as f:
        f.seek(start)
        return f.read(end - start)


def count_line_breaks(task: InputRange) -> tuple[tuple[int, int], int]:
    """``((file, range), number of b"\\n" in [start, end))``: the first pass."""
    return (task.file_index, task.range_index), _read_bytes(
        task.path, task.start, task.end).count(b"\n")


def first_line_numbers(counts: list[tuple[tuple[int, int], int]]) -> dict[tuple[int, int],
                                                                            int]:
    """Line breaks before each range, per file: ``(file, range) → count``."""
    before: dict[tuple[int, int], int] = {}
    so_far: dict[int, int] = {}
    for (file_index, range_index), count in sorted(counts):
        before[file_index, range_index] = so_far.get(file_index, 0)
        so_far[file_index] = so_far.get(file_index, 0) + count
    return before


def read_owned_lines(task: InputRange, max_line_bytes: int | None = None
                     ) -> tuple[bytes, int]:
    """The lines that start in ``[start, end)``, and how many line breaks precede the
    first of them inside the range (0, or 1 when the range starts mid-line).

    With ``max_line_bytes``, the last line is read past the range's end only until it
    is found longer than that (then it is cut, and still longer)."""
    with storage.open_read(task.path) as f:
        skipped = 0
        if task.start > 0:
            f.seek(task.start - 1)
            data = f.read(task.end - task.start + 1)
            if data[:1] == b"\n":
                data = data[1:]
            else:  # The range starts inside a line: the previous range owns it.
                cut = data.find(b"\n")
                data = b"" if cut < 0 else data[cut + 1:]
                skipped = 1
                if cut < 0:
                    return b"", 0
        else:
            data = f.read(task.end)
        # Finish the last line, which may end after the range.
        if data and not data.endswith(b"\n") and task.end > task.start:
            tail = []
            tail_bytes = 0
            while max_line_bytes is None or tail_bytes <= max_line_bytes:
                more = f.read(_READ_TAIL_BYTES)
                if not more:
                    break
                cut = more.find(b"\n")
                if cut >= 0:
                    tail.append(more[:cut + 1])
                    break
                tail.append(more)
                tail_bytes += len(more)
            data += b"".join(tail)
    return data, skipped


def line_too_long(path: str, line: int, max_line_bytes: int) -> dead_letters.InputError:
    """The error for line ``line`` of ``path``, longer than ``max_line_bytes``."""
    return dead_letters.InputError(
        f"Line {line} of {path!r} is longer than --max_line_mb={max_line_bytes / _MIB:g} "
        f"({max_line_bytes} bytes): raise --max_line_mb (at most "
        f"{MAX_LINE_BYTES_LIMIT // _MIB}) to read it.")


def long_line(block: bytes, min_length: int) -> tuple[int, int] | None:
    """``(index, length)`` of the longest line of ``block`` (length: its bytes, the
    line break aside; index: 0 for the first line) when it is ``min_length`` bytes or
    longer, else None.

    Cheap when no line is: every ``min_length // 2`` bytes a search for a line break
    that ordinary lines end at once; only when one finds none are the lines measured.
    """
    window = max(1, min_length // 2)
    # A line of 2 * window - 1 bytes or more spans a whole window at a multiple of
    # window; each window holding a line break bounds every line to fewer bytes.
    if all(block.find(b"\n", start, start + window) >= 0
           for start in range(0, len(block) - window + 1, window)):
        return None
    breaks = np.flatnonzero(np.frombuffer(block, np.uint8) == ord("\n"))
    lengths = np.diff(np.concatenate([[-1], breaks, [len(block)]])) - 1
    index = int(np.argmax(lengths))
    length = int(lengths[index])
    return (index, length) if length >= min_length else None


def _has_line_break(f: IO[bytes], start: int, end: int) -> bool:
    """Whether bytes ``[start, end)`` of ``f`` hold a line break."""
    f.seek(start)
    size = _PROBE_BYTES
    while start < end:
        data = f.read(min(size, end - start))
        if not data:
            return False
        if b"\n" in data:
            return True
        start += len(data)
        size = _SCAN_BYTES
    return False


def _line_span(f: IO[bytes], start: int, end: int, size: int, max_bytes: int
               ) -> tuple[int, int]:
    """Where the line holding bytes ``[start, end)`` (no line break there) of the
    ``size``-byte file ``f`` starts and ends (at its line break or the file's end),
    looked for only until the line is found longer than ``max_bytes``."""
    while start > 0 and end - start <= max_bytes:
        step = min(_SCAN_BYTES, start)
        f.seek(start - step)
        cut = f.read(step).rfind(b"\n")
        if cut >= 0:
            start = start - step + cut + 1
            break
        start -= step
    f.seek(end)
    while end < size and end - start <= max_bytes:
        data = f.read(_SCAN_BYTES)
        if not data:
            break
        cut = data.find(b"\n")
        if cut >= 0:
            return start, end + cut
        end += len(data)
    return start, end


def _line_breaks_before(f: IO[bytes], offset: int) -> int:
    """How many line breaks bytes ``[0, offset)`` of ``f`` hold."""
    f.seek(0)
    count = 0
    while offset > 0:
        data = f.read(min(_SCAN_BYTES, offset))
        if not data:
            break
        count += data.count(b"\n")
        offset -= len(data)
    return count


def find_long_line(path: str, size: int, max_line_bytes: int) -> int | None:
    """The number (1-based) of the first line of the ``size``-byte text file at
    ``path`` longer than ``max_line_bytes`` (its line break aside), or None.

    Reads a probe of 64 KiB every ``max_line_bytes // 2 + 1`` bytes (nothing in a
    smaller file): a longer line spans a whole such window, and a window of
    ordinary lines shows a line break in its first bytes. Only a window without
    one is read whole, and the line across it measured.
    """
    window = max_line_bytes // 2 + 1
    if size < window:
        return None
    with storage.open_read(path) as f:
        for start in range(0, size - window + 1, window):
            if _has_line_break(f, start, start + window):
                continue
            first, end = _line_span(f, start, start + window, size, max_line_bytes)
            if end - first > max_line_bytes:
                return 1 + _line_breaks_before(f, start)
    return None
