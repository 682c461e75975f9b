"""Input ranges: the read tasks a long-format input is cut into, and their lines.

A text file (CSV, JSON Lines) is cut into byte ranges; a range owns the lines that
*start* inside it. A Parquet file is cut into its row groups. Line numbers
(``<file>:<line>`` in dead letters) come from a first pass that counts the line
breaks of every range (``count_line_breaks``, ``first_line_numbers``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from etl.core import storage
from etl.timeseries.sources import Columns, check_columns

# Bytes of CSV / JSON Lines one read task parses (its lines: those starting inside).
RANGE_BYTES = 32 * 1024 * 1024
# A row's input position: file index × POSITION_FILE_STRIDE + line (or row) number.
POSITION_FILE_STRIDE = 1 << 40

_READ_TAIL_BYTES = 64 * 1024


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


def read_owned_lines(task: InputRange) -> tuple[bytes, int]:
    """The lines that start in ``[start, end)``, and how many line breaks precede the
    first of them inside the range (0, or 1 when the range starts mid-line)."""
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
            while True:
                more = f.read(_READ_TAIL_BYTES)
                if not more:
                    break
                cut = more.find(b"\n")
                if cut >= 0:
                    tail.append(more[:cut + 1])
                    break
                tail.append(more)
            data += b"".join(tail)
    return data, skipped
