"""Long-format inputs → per-bucket ``RowChunk``s, read and validated column by column.

Large files are cut into byte ranges (Parquet: row groups), each parsed by one
worker into Arrow arrays (pyarrow's CSV and Parquet readers), validated as whole
columns, and cut into at most one ``RowChunk`` per *bucket* of series
(``stable_hash64(series_id, "bucket") % num_buckets``), written to the range's
spill file. Only ``(bucket, ChunkRef)`` records leave the step, so grouping them
gives the series step every row of whole series, a bucket at a time, while the
runner never holds the input (Beam's local runner keeps what crosses a stage in
memory, unspilled: grouping the chunks themselves took the job's peak memory from
1.5 to 2.4 GB when the input tripled).

``etl.timeseries.sources.parse_row`` is the reference for what a row means. The
column-wise path only decides rows it provably decides the same way (plain CSV
fields, numbers matching a plain decimal pattern, timestamps parsed once per
distinct text by ``parse_timestamp`` itself); every other row (quoted or non-ASCII
CSV lines, JSON Lines, odd values, anything that fails) goes through ``parse_row``,
so rejections, their messages and the row accounting are exactly the row path's.

A range owns the lines that *start* inside it. Line numbers (``<file>:<line>`` in
dead letters) come from a first pass that counts the line breaks of every range.
"""

from __future__ import annotations

import collections
import concurrent.futures
import dataclasses
import math
import os
import posixpath
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from apache_beam.transforms import window

from etl.core import dead_letters, hashing, text_rows
from etl.core.atomic_files import atomic_path
from etl.core.dead_letters import Rejection
from etl.timeseries.chunks import (
    DATETIME_BIT,
    NUMERIC_BIT,
    POSITION_FILE_STRIDE,
    ChunkRef,
    RowChunk,
    decode_chunk,
    detect_style,
    encode_chunk,
)
from etl.timeseries.sources import (
    DATETIME,
    FLOAT32_OVERFLOW,
    Columns,
    Row,
    check_columns,
    input_format,
    matched_files,
    parse_row,
    parse_timestamp,
)

# Bytes of CSV / JSON Lines one read task parses (its lines: those starting inside).
RANGE_BYTES = 32 * 1024 * 1024
# Input bytes per bucket of series: the grouping step holds one bucket at a time.
BUCKET_INPUT_BYTES = 64 * 1024 * 1024
MAX_BUCKETS = 4096
BUCKET_SALT = "bucket"
# Tagged output of the read step: (rows parsed into chunks) per range.
ROW_COUNTS = "row_counts"

_READ_TAIL_BYTES = 64 * 1024
_BOM_BYTES = text_rows.BOM.encode()
# A CSV line the column-wise path reads: printable ASCII without quotes, so its
# fields are exactly its comma-separated parts (and Python's strip() removes only
# spaces from them).
_PLAIN_BYTES = bytes(b for b in range(0x20, 0x7F) if b != ord('"')) + b"\n"
# RE2 patterns (pyarrow.compute): a plain decimal number, a missing-value word.
_PLAIN_NUMBER = r"^ *[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)? *$"
_MISSING_WORD = r"^ *((?i)nan|null|none|na|n/a)? *$"


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


def num_buckets(total_bytes: int) -> int:
    """Buckets of series for ``total_bytes`` of input."""
    return max(1, min(MAX_BUCKETS, math.ceil(total_bytes / BUCKET_INPUT_BYTES)))


def bucket_of(series_id: str, buckets: int) -> int:
    return hashing.stable_hash64(series_id, BUCKET_SALT) % buckets


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
        metadata = pq.ParquetFile(path).metadata
        names = metadata.schema.to_arrow_schema().names
        missing = [c for c in (columns.series_id, columns.timestamp, *columns.values)
                   if c not in names]
        if missing:
            raise ValueError(f"{path!r} lacks column(s) {missing}; it has {names}.")
        first_row = 1
        for group in range(metadata.num_row_groups):
            ranges.append(InputRange(file_index, group, path, group, first_row))
            first_row += metadata.row_group(group).num_rows
    return ranges


def _open(path: str) -> Any:
    """A binary, seekable reader of ``path`` on any filesystem Beam knows (local,
    gs://, ...), the file's bytes as stored (no decompression)."""
    from apache_beam.io.filesystem import CompressionTypes
    from apache_beam.io.filesystems import FileSystems

    return FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED)


def _read_bytes(path: str, start: int, end: int) -> bytes:
    with _open(path) as f:
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
    running: dict[int, int] = {}
    for (file_index, range_index), count in sorted(counts):
        before[file_index, range_index] = running.get(file_index, 0)
        running[file_index] = running.get(file_index, 0) + count
    return before


def read_owned_lines(task: InputRange) -> tuple[bytes, int]:
    """The lines that start in ``[start, end)``, and how many line breaks precede the
    first of them inside the range (0, or 1 when the range starts mid-line)."""
    with _open(task.path) as f:
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


@dataclasses.dataclass
class ParsedRows:
    """Rows of one range that parsed, as columns; rejections of the others."""

    series_ids: list[str]  # distinct ids; codes index into it
    codes: np.ndarray  # int64 [n]
    times: np.ndarray  # float64 [n]
    kinds: np.ndarray  # uint8 [n], NUMERIC_BIT or DATETIME_BIT
    text_dictionary: list[str]  # distinct timestamps as written (stripped)
    text_codes: np.ndarray  # int64 [n] into text_dictionary
    values: np.ndarray  # float64 [n, F]
    positions: np.ndarray  # int64 [n]
    rejections: list[Rejection]


class _RowsBuilder:
    """Gathers the column-wise path's rows and ``parse_row``'s, in any order."""

    def __init__(self, num_features: int) -> None:
        self._num_features = num_features
        self._ids: dict[str, int] = {}
        self._texts: dict[str, int] = {}
        self._parts: list[tuple[np.ndarray, ...]] = []
        self._slow: list[tuple[int, Row]] = []
        self.rejections: list[Rejection] = []

    def code(self, series_id: str) -> int:
        return self._ids.setdefault(series_id, len(self._ids))

    def text_code(self, text: str) -> int:
        return self._texts.setdefault(text, len(self._texts))

    def add_columns(self, codes: np.ndarray, times: np.ndarray, kinds: np.ndarray,
                    text_codes: np.ndarray, values: np.ndarray, positions: np.ndarray
                    ) -> None:
        self._parts.append((codes, times, kinds, text_codes, values, positions))

    def add_result(self, position: int, result: Row | Rejection) -> None:
        if isinstance(result, Rejection):
            self.rejections.append(result)
        else:
            self._slow.append((position, result))

    def build(self) -> ParsedRows:
        parts = list(self._parts)
        if self._slow:
            rows = [row for _, row in self._slow]
            parts.append((
                np.array([self.code(r.series_id) for r in rows], np.int64),
                np.array([r.time for r in rows], np.float64),
                np.array([DATETIME_BIT if r.time_kind == DATETIME else NUMERIC_BIT
                          for r in rows], np.uint8),
                np.array([self.text_code(r.time_text) for r in rows], np.int64),
                np.array([r.values for r in rows], np.float64).reshape(
                    len(rows), self._num_features),
                np.array([p for p, _ in self._slow], np.int64)))
        if not parts:
            parts = [(np.zeros(0, np.int64), np.zeros(0), np.zeros(0, np.uint8),
                      np.zeros(0, np.int64), np.zeros((0, self._num_features)),
                      np.zeros(0, np.int64))]
        codes, times, kinds, text_codes, values, positions = (
            np.concatenate(c) for c in zip(*parts, strict=True))
        return ParsedRows(list(self._ids), codes, times, kinds, list(self._texts),
                          text_codes, values, positions, self.rejections)


def _as_array(column: pa.Array | pa.ChunkedArray) -> pa.Array:
    return column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column


def _distinct(column: pa.Array) -> tuple[list[Any], np.ndarray]:
    """Distinct values (as Python objects) and each row's index into them (-1: null)."""
    encoded = pc.dictionary_encode(column)
    indices = encoded.indices.to_numpy(zero_copy_only=False)
    if encoded.indices.null_count:
        indices = np.where(encoded.indices.is_null().to_numpy(zero_copy_only=False), -1,
                           indices)
    return encoded.dictionary.to_pylist(), indices.astype(np.int64)


def _fast_values(column: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """``(values, decided)``: float64 values of the rows this path decides exactly
    as ``parse_value`` does (plain numbers, missing words, numeric types)."""
    n = len(column)
    kind = column.type
    if pa.types.is_floating(kind) or pa.types.is_integer(kind):
        # Unchecked: int64 beyond 2**53 rounds to nearest, as Python's float(int).
        values = pc.cast(column, pa.float64(), safe=False).to_numpy(zero_copy_only=False)
        values = np.where(column.is_null().to_numpy(zero_copy_only=False), np.nan, values)
        decided = np.isnan(values) | (np.abs(values) < FLOAT32_OVERFLOW)
        return values, decided
    if not (pa.types.is_string(kind) or pa.types.is_large_string(kind)):
        return np.full(n, np.nan), np.zeros(n, bool)
    # Common case first: one cast of the whole column, empty strings aside. Every
    # string Arrow reads as a finite number Python's float() reads as the same number
    # (both round correctly); it refuses spaces, underscores and words, and then the
    # patterns below decide. A null or non-finite result is left to parse_value.
    empty = pc.fill_null(pc.equal(pc.binary_length(column), 0), False)
    try:
        cast = pc.cast(pc.if_else(empty, "0", column), pa.float64())
    except pa.ArrowInvalid:
        pass
    else:
        values = cast.to_numpy(zero_copy_only=False)
        empty = empty.to_numpy(zero_copy_only=False)
        with np.errstate(invalid="ignore"):
            decided = empty | (np.abs(values) < FLOAT32_OVERFLOW)
        if column.null_count:
            decided &= ~column.is_null().to_numpy(zero_copy_only=False)
        return np.where(empty, np.nan, values), decided
    number = pc.fill_null(pc.match_substring_regex(column, _PLAIN_NUMBER), False)
    missing = pc.fill_null(pc.match_substring_regex(column, _MISSING_WORD), False)
    text = pc.if_else(number, pc.utf8_trim(column, " "), "0")
    values = pc.cast(text, pa.float64()).to_numpy(zero_copy_only=False)
    number = number.to_numpy(zero_copy_only=False)
    missing = missing.to_numpy(zero_copy_only=False)
    values = np.where(missing, np.nan, values)
    decided = missing | (number & (np.abs(values) < FLOAT32_OVERFLOW))
    return values, decided


def _add_table(builder: _RowsBuilder, table: Mapping[str, pa.Array], columns: Columns,
               positions: np.ndarray, source_of: Any) -> None:
    """Validates the columns of ``table`` (name → array of raw values) into
    ``builder``: rows decided column-wise, the rest through ``parse_row``."""
    n = len(positions)
    if not n:
        return
    ids, id_index = _distinct(table[columns.series_id])
    id_codes = []
    for value in ids:
        text = "" if value is None else str(value).strip()
        id_codes.append(builder.code(text) if text else -1)
    id_codes_arr = np.array([*id_codes, -1], np.int64)
    codes = id_codes_arr[id_index]
    ok = codes >= 0

    # Each distinct timestamp is parsed once, by parse_timestamp itself. Index -1
    # (a null) reads the extra last entry: not parsed.
    stamps, stamp_index = _distinct(table[columns.timestamp])
    parsed_times = np.zeros(len(stamps) + 1)
    parsed_kinds = np.zeros(len(stamps) + 1, np.uint8)
    parsed_texts = np.full(len(stamps) + 1, -1, np.int64)
    for k, value in enumerate(stamps):
        try:
            time, text, kind = parse_timestamp(value)
        except ValueError:
            continue
        parsed_times[k] = time
        parsed_kinds[k] = DATETIME_BIT if kind == DATETIME else NUMERIC_BIT
        parsed_texts[k] = builder.text_code(text)
    ok &= parsed_kinds[stamp_index] > 0

    values = np.empty((n, len(columns.values)))
    for f, name in enumerate(columns.values):
        column_values, decided = _fast_values(table[name])
        values[:, f] = column_values
        ok &= decided

    fast = np.flatnonzero(ok)
    fast_stamps = stamp_index[fast]
    builder.add_columns(codes[fast], parsed_times[fast_stamps], parsed_kinds[fast_stamps],
                        parsed_texts[fast_stamps], values[fast], positions[fast])
    slow = np.flatnonzero(~ok)
    if len(slow):
        needed = {name: table[name].take(pa.array(slow)).to_pylist()
                  for name in dict.fromkeys((columns.series_id, columns.timestamp,
                                             *columns.values))}
        for i, row_index in enumerate(slow.tolist()):
            row = {name: values_[i] for name, values_ in needed.items()}
            position = int(positions[row_index])
            builder.add_result(position, parse_row(row, columns, source_of(position)))


def _line_spans(block: bytes) -> tuple[np.ndarray, np.ndarray]:
    """Start and end (without the line break) of every line of ``block``."""
    breaks = np.flatnonzero(np.frombuffer(block, np.uint8) == ord("\n"))
    starts = np.concatenate([[0], breaks + 1])
    ends = np.concatenate([breaks, [len(block)]])
    if len(block) and block.endswith(b"\n"):
        starts, ends = starts[:-1], ends[:-1]
    return starts, ends


def _read_plain_csv(data: bytes, num_columns: int, needed: Mapping[str, int]
                    ) -> dict[str, pa.Array] | None:
    """pyarrow's parse of plain, well-formed CSV lines (no header), or None when any
    line is not a row of ``num_columns`` fields."""
    import pyarrow.csv as pa_csv

    names = [f"f{i}" for i in range(num_columns)]
    try:
        table = pa_csv.read_csv(
            pa.py_buffer(data),
            read_options=pa_csv.ReadOptions(column_names=names),
            parse_options=pa_csv.ParseOptions(quote_char=False, double_quote=False,
                                              newlines_in_values=False,
                                              ignore_empty_lines=False),
            convert_options=pa_csv.ConvertOptions(
                include_columns=sorted({names[i] for i in needed.values()}),
                column_types={names[i]: pa.string() for i in needed.values()},
                strings_can_be_null=False, quoted_strings_can_be_null=False))
    except pa.ArrowInvalid:
        return None
    return {name: _as_array(table.column(names[i])) for name, i in needed.items()}


def _is_plain_block(block: bytes) -> bool:
    """Every line plain (see _PLAIN_BYTES), a line break at most preceded by one
    carriage return, and no empty line."""
    if block.startswith(b"\n") or b"\n\n" in block:
        return False
    leftover = block.translate(None, _PLAIN_BYTES)
    if not leftover:
        return True
    return not leftover.strip(b"\r") and block.count(b"\r") == block.count(b"\r\n") and not (
        block.startswith(b"\r\n") or b"\n\r\n" in block)


def csv_block_rows(block: bytes, first_line: int, header: tuple[str, ...],
                   columns: Columns, file_index: int, path: str) -> ParsedRows:
    """The rows of ``block`` (whole CSV data lines; the first is line ``first_line``)."""
    builder = _RowsBuilder(len(columns.values))
    base = file_index * POSITION_FILE_STRIDE

    def source_of(position: int) -> str:
        return f"{path}:{position - base}"

    # A column named twice in the header: the later field wins (as in a dict).
    needed = {name: max(i for i, h in enumerate(header) if h == name)
              for name in (columns.series_id, columns.timestamp, *columns.values)}
    if not block:
        return builder.build()
    if len(header) >= 2 and _is_plain_block(block):
        table = _read_plain_csv(block, len(header), needed)
        count = block.count(b"\n") + (not block.endswith(b"\n"))
        if table is not None and len(table[columns.series_id]) == count:
            _add_table(builder, table, columns,
                       base + first_line + np.arange(count, dtype=np.int64), source_of)
            return builder.build()
    # Some line needs a closer look: the plain ones still go column-wise.
    starts, ends = _line_spans(block)
    plain_lines, plain_numbers = [], []
    for k, (a, b) in enumerate(zip(starts.tolist(), ends.tolist(), strict=True)):
        raw = block[a:b].rstrip(b"\r")
        number = first_line + k
        if (len(header) >= 2 and raw.strip(b" ") and not raw.translate(None, _PLAIN_BYTES)
                and raw.count(b",") == len(header) - 1):
            plain_lines.append(raw)
            plain_numbers.append(number)
            continue
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError:
            line = None
        if line is not None and not line.strip():
            continue
        row = None if line is None else text_rows.parse_csv_line(line, header)
        position = base + number
        if row is None:
            builder.add_result(position, _malformed(source_of(position), raw, line))
        else:
            builder.add_result(position, parse_row(row, columns, source_of(position)))
    if plain_lines:
        table = _read_plain_csv(b"\n".join(plain_lines), len(header), needed)
        if table is None:  # Not expected: each line was checked to be one plain row.
            raise ValueError(f"pyarrow could not read plain lines of {path!r}.")
        _add_table(builder, table, columns,
                   base + np.array(plain_numbers, np.int64), source_of)
    return builder.build()


def _malformed(source: str, raw: bytes, line: str | None) -> Rejection:
    shown = line[:200] if line is not None else raw[:200].decode("utf-8", "replace")
    what = "Cannot parse line" if line is not None else "Line is not UTF-8 text"
    return Rejection(key=source, source=source, reason=dead_letters.MALFORMED_ROW,
                     message=f"{what}: {shown!r}")


# Arrow types a JSON Lines column may have for the column-wise path to stand for
# json.loads + parse_row: each Arrow value reads back as the Python value json.loads
# gave. Not float64 for the series id or timestamp: pyarrow types a column float64 when
# it mixes 7 and 7.5, and json.loads kept 7 an int (its text is "7", not "7.0").
_JSON_EXACT_TYPES = (pa.types.is_string, pa.types.is_large_string, pa.types.is_int64,
                     pa.types.is_boolean, pa.types.is_null)


def _read_plain_jsonl(block: bytes, columns: Columns) -> dict[str, pa.Array] | None:
    """pyarrow's parse of ``block``'s needed columns (one JSON object per line), or
    None when it cannot stand for parsing each line alone: a line pyarrow skips or
    refuses, a nested value, a type that hides what a line held (above)."""
    import pyarrow.json as pa_json

    count = block.count(b"\n") + (not block.endswith(b"\n"))
    needed = list(dict.fromkeys((columns.series_id, columns.timestamp, *columns.values)))
    try:
        table = pa_json.read_json(pa.py_buffer(block))
        # pyarrow turns strings that look like dates into timestamps: read those
        # columns again as the strings they are.
        dated = [name for name in needed if name in table.column_names
                 and pa.types.is_temporal(table.schema.field(name).type)]
        if dated:
            table = pa_json.read_json(pa.py_buffer(block), parse_options=pa_json.ParseOptions(
                explicit_schema=pa.schema([(name, pa.string()) for name in dated])))
    except pa.ArrowInvalid:
        return None
    if table.num_rows != count:  # pyarrow skips blank lines; they are no rows here either,
        return None              # but then row k is not line k.
    arrays = {}
    for name in needed:
        if name not in table.column_names:
            arrays[name] = pa.nulls(count)
            continue
        array = _as_array(table.column(name))
        exact = any(check(array.type) for check in _JSON_EXACT_TYPES)
        if name in columns.values and pa.types.is_float64(array.type):
            exact = True  # A value 7 or 7.0 is the same float.
        if not exact:
            return None
        arrays[name] = array
    return arrays


def jsonl_block_rows(block: bytes, first_line: int, columns: Columns, file_index: int,
                     path: str, strip_bom: bool) -> ParsedRows:
    """The rows of ``block`` (whole JSON Lines; the first is line ``first_line``)."""
    builder = _RowsBuilder(len(columns.values))
    base = file_index * POSITION_FILE_STRIDE
    plain = block
    while strip_bom and plain.startswith(_BOM_BYTES):
        plain = plain[len(_BOM_BYTES):]
    table = _read_plain_jsonl(plain, columns) if plain else None
    if table is not None:
        count = len(table[columns.series_id])
        _add_table(builder, table, columns,
                   base + first_line + np.arange(count, dtype=np.int64),
                   lambda position: f"{path}:{position - base}")
        return builder.build()
    starts, ends = _line_spans(block)
    for k, (a, b) in enumerate(zip(starts.tolist(), ends.tolist(), strict=True)):
        number = first_line + k
        source = f"{path}:{number}"
        raw = block[a:b].rstrip(b"\r")
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError:
            line = None
        if line is not None and k == 0 and strip_bom:
            line = line.lstrip(text_rows.BOM)
        if line is not None and not line.strip():
            continue
        row = None if line is None else text_rows.parse_jsonl_line(line)
        if row is None:
            builder.add_result(base + number, _malformed(source, raw, line))
        else:
            builder.add_result(base + number, parse_row(row, columns, source))
    return builder.build()


def parquet_group_rows(task: InputRange, columns: Columns) -> ParsedRows:
    """The rows of one Parquet row group; row ``n`` of the file is ``<file>:row<n>``."""
    import pyarrow.parquet as pq

    builder = _RowsBuilder(len(columns.values))
    base = task.file_index * POSITION_FILE_STRIDE
    names = list(dict.fromkeys((columns.series_id, columns.timestamp, *columns.values)))
    table = pq.ParquetFile(task.path).read_row_group(task.start, columns=names)
    arrays = {name: _as_array(table.column(name)) for name in names}
    count = table.num_rows
    _add_table(builder, arrays, columns,
               base + task.end + np.arange(count, dtype=np.int64),
               lambda position: f"{task.path}:row{position - base}")
    return builder.build()


def to_chunks(parsed: ParsedRows, buckets: int) -> Iterator[tuple[int, RowChunk]]:
    """``(bucket, RowChunk)`` for every bucket with rows; series sorted by id, each
    series' rows in input order."""
    if not len(parsed.codes):
        return
    ids = parsed.series_ids
    rank = np.empty(len(ids), np.int64)
    rank[np.argsort(np.array(ids, dtype=object))] = np.arange(len(ids))
    id_bucket = np.array([bucket_of(i, buckets) for i in ids], np.int64)
    order = np.lexsort((parsed.positions, rank[parsed.codes], id_bucket[parsed.codes]))
    codes = parsed.codes[order]
    # The range's distinct timestamps: when one format writes them all from their
    # times, the texts are left out.
    text_times = np.zeros(len(parsed.text_dictionary))
    text_times[parsed.text_codes] = parsed.times
    style = detect_style(parsed.text_dictionary, text_times,
                         int(np.bitwise_or.reduce(parsed.kinds)))
    dictionary = None if style else pa.array(parsed.text_dictionary, pa.large_string())
    run_starts = np.flatnonzero(np.concatenate([[True], codes[1:] != codes[:-1]]))
    run_ends = np.concatenate([run_starts[1:], [len(codes)]])
    run_buckets = id_bucket[codes[run_starts]]
    run_kinds = np.bitwise_or.reduceat(parsed.kinds[order], run_starts)
    for bucket in np.unique(run_buckets).tolist():
        runs = np.flatnonzero(run_buckets == bucket)
        first, last = int(run_starts[runs[0]]), int(run_ends[runs[-1]])
        rows = order[first:last]
        yield bucket, RowChunk(
            series_ids=[ids[c] for c in codes[run_starts[runs]].tolist()],
            run_lengths=(run_ends[runs] - run_starts[runs]).astype(np.int64),
            run_kinds=run_kinds[runs].astype(np.uint8),
            times=parsed.times[rows], values=parsed.values[rows],
            positions=parsed.positions[rows], text_style=style,
            texts=None if dictionary is None else dictionary.take(
                pa.array(parsed.text_codes[rows])))


def spill_chunks(chunks: Iterator[tuple[int, RowChunk]], path: str
                 ) -> Iterator[tuple[int, ChunkRef]]:
    """Writes a range's chunks to ``path`` (temporary name, then renamed) and returns
    ``(bucket, ChunkRef)`` for each; no file when there is none."""
    import tensorflow as tf

    encoded = [(bucket, len(chunk), encode_chunk(chunk)) for bucket, chunk in chunks]
    if not encoded:
        return iter(())
    refs = []
    offset = 0
    with atomic_path(path) as tmp_path, tf.io.gfile.GFile(tmp_path, "wb") as out:
        for bucket, rows, data in encoded:
            out.write(data)
            refs.append((bucket, ChunkRef(path, offset, len(data), rows)))
            offset += len(data)
    return iter(refs)


def read_chunks(refs: Iterator[ChunkRef]) -> Iterator[RowChunk]:
    """The chunks ``refs`` name, read file by file in offset order."""
    by_path: dict[str, list[ChunkRef]] = {}
    for ref in refs:
        by_path.setdefault(ref.path, []).append(ref)
    for path in sorted(by_path):
        with _open(path) as f:
            for ref in sorted(by_path[path], key=lambda r: r.offset):
                f.seek(ref.offset)
                yield decode_chunk(f.read(ref.length))


def parse_range(task: InputRange, first_line: int, fmt: str, columns: Columns,
                header: tuple[str, ...], buckets: int, spill_dir: str
                ) -> tuple[list[Rejection], int, list[tuple[int, ChunkRef]]]:
    """Parses one range and spills its chunks: ``(rejections, rows, (bucket, ref)s)``.

    ``first_line`` is the number of the range's first line (1 + the line breaks
    before the range); unused for Parquet.
    """
    if fmt == "parquet":
        parsed = parquet_group_rows(task, columns)
    else:
        block, skipped = read_owned_lines(task)
        first_line += skipped
        if fmt == "csv":
            if task.start == 0:  # The header line.
                cut = block.find(b"\n")
                block = b"" if cut < 0 else block[cut + 1:]
                first_line += 1
            parsed = csv_block_rows(block, first_line, header, columns, task.file_index,
                                    task.path)
        else:
            parsed = jsonl_block_rows(block, first_line, columns, task.file_index,
                                      task.path, strip_bom=task.start == 0)
    path = posixpath.join(spill_dir, f"range-{task.file_index:05d}-{task.range_index:06d}.bin")
    refs = list(spill_chunks(to_chunks(parsed, buckets), path))
    return parsed.rejections, len(parsed.codes), refs


class ParseRange(beam.DoFn):
    """``InputRange`` → ``(bucket, ChunkRef)``s (the rows wait in the range's spill
    file under ``spill_dir``), tagged ``Rejection``s and ``(ROW_COUNTS, rows)``.

    Up to one range per core is parsed at once on a thread pool (pyarrow, numpy and
    file I/O release the GIL), since the local runner hands this step its ranges one
    at a time; outputs (and Beam counters) are emitted from the calling thread.
    """

    def __init__(self, fmt: str, columns: Columns, headers: Sequence[tuple[str, ...]],
                 buckets: int, spill_dir: str) -> None:
        self._fmt = fmt
        self._columns = columns
        self._headers = list(headers)
        self._buckets = buckets
        self._spill_dir = spill_dir

    def setup(self) -> None:
        self._threads = max(1, os.cpu_count() or 1)
        self._pool = concurrent.futures.ThreadPoolExecutor(self._threads,
                                                           thread_name_prefix="ParseRange")

    def teardown(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)

    def start_bundle(self) -> None:
        self._in_flight: collections.deque[concurrent.futures.Future] = collections.deque()

    def process(self, task: InputRange, line_breaks_before: dict[tuple[int, int], int]
                ) -> Iterator[Any]:
        first_line = 1 + line_breaks_before.get((task.file_index, task.range_index), 0)
        header = self._headers[task.file_index] if self._fmt == "csv" else ()
        self._in_flight.append(self._pool.submit(
            parse_range, task, first_line, self._fmt, self._columns, header,
            self._buckets, self._spill_dir))
        while len(self._in_flight) > self._threads:
            yield from self._emit(self._in_flight.popleft().result(), windowed=False)

    def finish_bundle(self) -> Iterator[Any]:
        while self._in_flight:
            yield from self._emit(self._in_flight.popleft().result(), windowed=True)

    @staticmethod
    def _emit(result: tuple[list[Rejection], int, list[tuple[int, ChunkRef]]],
              windowed: bool) -> Iterator[Any]:
        def wrap(value: Any) -> Any:
            return window.GlobalWindows.windowed_value(value) if windowed else value

        rejections, rows, refs = result
        for rejection in rejections:
            for output in dead_letters.route(rejection):
                yield beam.pvalue.TaggedOutput(output.tag, wrap(output.value))
        yield beam.pvalue.TaggedOutput(ROW_COUNTS, wrap(rows))
        for ref in refs:
            yield wrap(ref)


@dataclasses.dataclass(frozen=True)
class InputPlan:
    """What the driver learns about the input before the job runs."""

    fmt: str
    files: tuple[str, ...]
    headers: tuple[tuple[str, ...], ...]  # CSV only
    ranges: tuple[InputRange, ...]
    buckets: int

    @classmethod
    def from_pattern(cls, pattern: str, columns: Columns,
                     range_bytes: int = RANGE_BYTES) -> InputPlan:
        """Matches the files, checks their columns and cuts them into ranges.

        Raises:
            ValueError: for an unknown extension, no match, or a missing column.
        """
        from apache_beam.io.filesystems import FileSystems

        fmt = input_format(pattern)
        files = tuple(matched_files(pattern))
        sizes = {m.path: m.size_in_bytes
                 for m in FileSystems.match([pattern])[0].metadata_list}
        headers: tuple[tuple[str, ...], ...] = ()
        if fmt == "csv":
            headers = tuple(text_rows.read_csv_header(path) for path in files)
            for path, header in zip(files, headers, strict=True):
                check_columns(header, columns, path)
        if fmt == "parquet":
            ranges = plan_parquet_ranges(files, columns)
        else:
            ranges = plan_text_ranges([(path, sizes[path]) for path in files], range_bytes)
        return cls(fmt, files, headers, tuple(ranges),
                   num_buckets(sum(sizes.values())))


class ReadSeriesChunks(beam.PTransform):
    """Reads the input as ``(bucket, ChunkRef)`` plus tagged ``Rejection``s and
    per-range ``ROW_COUNTS``; every position is ``<file>:<line>``
    (``<file>:row<n>`` for Parquet). The chunks are written under ``spill_dir``."""

    def __init__(self, plan: InputPlan, columns: Columns, spill_dir: str) -> None:
        super().__init__()
        self._plan = plan
        self._columns = columns
        self._spill_dir = spill_dir

    def expand(self, pbegin: beam.pvalue.PBegin) -> Any:
        tasks = (
            pbegin
            | "ListRanges" >> beam.Create(list(self._plan.ranges))
            | "ReshuffleRanges" >> beam.Reshuffle()
        )
        if self._plan.fmt == "parquet":
            line_breaks: Any = {}
        else:
            line_breaks = beam.pvalue.AsSingleton(
                tasks
                | "CountLineBreaks" >> beam.Map(count_line_breaks)
                | "GatherLineBreaks" >> beam.combiners.ToList()
                | "LineBreaksBefore" >> beam.Map(first_line_numbers))
        return tasks | "ParseRanges" >> beam.ParDo(
            ParseRange(self._plan.fmt, self._columns, self._plan.headers,
                       self._plan.buckets, self._spill_dir),
            line_breaks_before=line_breaks).with_outputs(
                dead_letters.REJECTED, ROW_COUNTS, main="chunks")

