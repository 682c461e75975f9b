"""Columnar parsing: a range's CSV lines, JSON Lines or Parquet row group → ``ParsedRows``.

pyarrow's CSV, JSON and Parquet readers turn a whole block into Arrow columns when
that stands for parsing each line alone (simple CSV fields; JSON objects whose column
types read back as ``json.loads`` gives them); ``parsed_rows.add_table`` validates
those columns. Every other line (non-ASCII CSV, quotes inside a field, JSON Lines
that are not plain, lines that fail) is parsed alone by ``etl.core.io.text_rows`` and
``parse_row``. pyarrow reads a block of 1 MiB at a time and refuses a line that
spans a whole one, so a range holding a longer line is read in blocks sized to it.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping

import numpy as np
import pyarrow as pa

from etl.core import dead_letters
from etl.core.dead_letters import Rejection
from etl.core.io import storage, text_rows
from etl.timeseries.rows.parsed_rows import ParsedRows, RowsBuilder, add_table
from etl.timeseries.rows.ranges import (
    DEFAULT_MAX_LINE_BYTES,
    POSITION_FILE_STRIDE,
    InputRange,
    line_too_long,
    long_line,
    read_owned_lines,
)
from etl.timeseries.rows.sources import Columns, parse_row

_BOM_BYTES = text_rows.BOM.encode()
# pyarrow's CSV and JSON readers parse blocks of this many bytes (their default); a
# line longer than a block may span a whole one, which they refuse ("straddling
# object straddles two block boundaries").
ARROW_BLOCK_BYTES = 1 << 20
# A CSV line the column-wise path reads: printable ASCII without quotes, so its
# fields are exactly its comma-separated parts (and Python's strip() removes only
# spaces from them).
_PLAIN_BYTES = bytes(b for b in range(0x20, 0x7F) if b != ord('"')) + b"\n"
# A simple CSV field: printable ASCII without quotes and commas, or the same with
# commas wrapped in one pair of quotes (how pandas, pyarrow and R quote text). A line
# of such fields is the csv module's row of their texts, and pyarrow's too.
_SIMPLE_FIELD = rb'(?:"[\x20-\x21\x23-\x7e]*"|[\x20-\x21\x23-\x2b\x2d-\x7e]*)'


@functools.lru_cache(maxsize=64)
def _simple_line(num_columns: int) -> re.Pattern[bytes]:
    """A line of ``num_columns`` simple fields."""
    return re.compile(_SIMPLE_FIELD + rb"(?:," + _SIMPLE_FIELD + rb"){%d}" % (num_columns - 1))


@functools.lru_cache(maxsize=64)
def _simple_lines(num_columns: int) -> re.Pattern[bytes]:
    """A whole line of ``num_columns`` simple fields, in a block (multiline)."""
    return re.compile(rb"^" + _simple_line(num_columns).pattern + rb"\r?$", re.MULTILINE)


def _is_simple_block(block: bytes, num_columns: int) -> bool:
    """Every line of ``block`` is ``num_columns`` simple fields (a carriage return
    before its line break allowed; an empty line is not). Matched line by line, about
    1 s per 32 MiB range: one match of the whole block takes as long and holds ~1 GB
    of backtracking state."""
    lines = block.count(b"\n") + (not block.endswith(b"\n"))
    return sum(1 for _ in _simple_lines(num_columns).finditer(block)) == lines


def _as_array(column: pa.Array | pa.ChunkedArray) -> pa.Array:
    return column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column


def _line_spans(block: bytes) -> tuple[np.ndarray, np.ndarray]:
    """Start and end (without the line break) of every line of ``block``."""
    breaks = np.flatnonzero(np.frombuffer(block, np.uint8) == ord("\n"))
    starts = np.concatenate([[0], breaks + 1])
    ends = np.concatenate([breaks, [len(block)]])
    if len(block) and block.endswith(b"\n"):
        starts, ends = starts[:-1], ends[:-1]
    return starts, ends


def arrow_block_size(block: bytes, first_line: int, path: str,
                     max_line_bytes: int = DEFAULT_MAX_LINE_BYTES) -> int | None:
    """The block size pyarrow reads ``block``'s lines in (the first is line
    ``first_line`` of ``path``): None, its default, when none is longer than a
    block; else the smallest multiple of a block longer than the longest line.

    Raises:
        ValueError: for a line longer than ``max_line_bytes``, naming it and the flag.
    """
    longest = long_line(block, min(ARROW_BLOCK_BYTES, max_line_bytes) + 1)
    if longest is None:
        return None
    index, length = longest
    if length > max_line_bytes:
        raise line_too_long(path, first_line + index, max_line_bytes)
    if length <= ARROW_BLOCK_BYTES:
        return None
    return (length // ARROW_BLOCK_BYTES + 1) * ARROW_BLOCK_BYTES


def _read_plain_csv(data: bytes, num_columns: int, needed: Mapping[str, int],
                    block_size: int | None = None) -> dict[str, pa.Array] | None:
    """pyarrow's parse of simple, well-formed CSV lines (no header), or None when any
    line is not a row of ``num_columns`` fields. ``block_size``: see
    ``arrow_block_size``."""
    import pyarrow.csv as pa_csv

    names = [f"f{i}" for i in range(num_columns)]
    read_options = pa_csv.ReadOptions(column_names=names)
    if block_size is not None:
        read_options.block_size = block_size
    try:
        table = pa_csv.read_csv(
            pa.py_buffer(data),
            read_options=read_options,
            parse_options=pa_csv.ParseOptions(quote_char='"' if b'"' in data else False,
                                              double_quote=False,
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
                   columns: Columns, file_index: int, path: str,
                   block_size: int | None = None) -> ParsedRows:
    """The rows of ``block`` (whole CSV data lines; the first is line ``first_line``),
    read by pyarrow in blocks of ``block_size`` (``arrow_block_size``)."""
    builder = RowsBuilder(columns)
    base = file_index * POSITION_FILE_STRIDE

    def source_of(position: int) -> str:
        return f"{path}:{position - base}"

    # A column named twice in the header: the later field wins (as in a dict).
    needed = {name: max(i for i, h in enumerate(header) if h == name)
              for name in columns.names}
    if not block:
        return builder.build()
    if len(header) >= 2 and (_is_plain_block(block) or (
            b'"' in block and _is_simple_block(block, len(header)))):
        table = _read_plain_csv(block, len(header), needed, block_size)
        count = block.count(b"\n") + (not block.endswith(b"\n"))
        if table is not None and len(table[columns.series_id]) == count:
            add_table(builder, table, columns,
                      base + first_line + np.arange(count, dtype=np.int64), source_of)
            return builder.build()
    # Some line needs a closer look: the simple ones still go column-wise.
    starts, ends = _line_spans(block)
    plain_lines, plain_numbers = [], []
    for k, (a, b) in enumerate(zip(starts.tolist(), ends.tolist(), strict=True)):
        raw = block[a:b].rstrip(b"\r")
        number = first_line + k
        if len(header) >= 2 and raw.strip(b" ") and (
                (not raw.translate(None, _PLAIN_BYTES) and raw.count(b",") == len(header) - 1)
                or _simple_line(len(header)).fullmatch(raw)):
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
        table = _read_plain_csv(b"\n".join(plain_lines), len(header), needed,
                                block_size)
        if table is None:  # Not expected: each line passed the plain-row check above.
            raise ValueError(f"pyarrow could not read simple lines of {path!r}.")
        add_table(builder, table, columns,
                  base + np.array(plain_numbers, np.int64), source_of)
    return builder.build()


def _malformed(source: str, raw: bytes, line: str | None) -> Rejection:
    shown = line[:200] if line is not None else raw[:200].decode("utf-8", "replace")
    what = "Cannot parse line" if line is not None else "Line is not UTF-8 text"
    return Rejection(key=source, source=source, reason=dead_letters.MALFORMED_ROW,
                     message=f"{what}: {shown!r}")


# Arrow types a JSON Lines column may have for the column-wise path to stand for
# json.loads + parse_row: each Arrow value reads back as the Python value json.loads
# gives. Not float64 for the series id or timestamp: pyarrow types a column float64 when
# it mixes 7 and 7.5, and json.loads keeps 7 an int (its text is "7", not "7.0").
_JSON_EXACT_TYPES = (pa.types.is_string, pa.types.is_large_string, pa.types.is_int64,
                     pa.types.is_boolean, pa.types.is_null)


def _read_plain_jsonl(block: bytes, columns: Columns, block_size: int | None = None
                      ) -> dict[str, pa.Array] | None:
    """pyarrow's parse of ``block``'s needed columns (one JSON object per line), or
    None when it cannot stand for parsing each line alone: a line pyarrow skips or
    refuses, a nested value, a type that hides what a line held (above).
    ``block_size``: see ``arrow_block_size``."""
    import pyarrow.json as pa_json

    count = block.count(b"\n") + (not block.endswith(b"\n"))
    needed = list(columns.names)
    read_options = pa_json.ReadOptions()
    if block_size is not None:
        read_options.block_size = block_size
    try:
        table = pa_json.read_json(pa.py_buffer(block), read_options=read_options)
        # pyarrow turns strings that look like dates into timestamps: read those
        # columns again as the strings they are.
        dated = [name for name in needed if name in table.column_names
                 and pa.types.is_temporal(table.schema.field(name).type)]
        if dated:
            table = pa_json.read_json(
                pa.py_buffer(block), read_options=read_options,
                parse_options=pa_json.ParseOptions(
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
                     path: str, strip_bom: bool, block_size: int | None = None
                     ) -> ParsedRows:
    """The rows of ``block`` (whole JSON Lines; the first is line ``first_line``),
    read by pyarrow in blocks of ``block_size`` (``arrow_block_size``)."""
    builder = RowsBuilder(columns)
    base = file_index * POSITION_FILE_STRIDE
    plain = block
    while strip_bom and plain.startswith(_BOM_BYTES):
        plain = plain[len(_BOM_BYTES):]
    table = _read_plain_jsonl(plain, columns, block_size) if plain else None
    if table is not None:
        count = len(table[columns.series_id])
        add_table(builder, table, columns,
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

    builder = RowsBuilder(columns)
    base = task.file_index * POSITION_FILE_STRIDE
    names = list(columns.names)
    with storage.open_read(task.path) as f:
        table = pq.ParquetFile(f).read_row_group(task.start, columns=names)
    arrays = {name: _as_array(table.column(name)) for name in names}
    count = table.num_rows
    add_table(builder, arrays, columns,
              base + task.end + np.arange(count, dtype=np.int64),
              lambda position: f"{task.path}:row{position - base}")
    return builder.build()


def parse_range_rows(task: InputRange, first_line: int, fmt: str, columns: Columns,
                     header: tuple[str, ...],
                     max_line_bytes: int = DEFAULT_MAX_LINE_BYTES) -> ParsedRows:
    """The rows of one range of a ``fmt`` file.

    ``first_line`` is the number of the range's first line (1 + the line breaks
    before the range); unused for Parquet. ``header`` is the CSV file's header.

    Raises:
        ValueError: for a line longer than ``max_line_bytes`` (which the driver
            finds first in a local file: ``ranges.find_long_line``).
    """
    if fmt == "parquet":
        return parquet_group_rows(task, columns)
    block, skipped = read_owned_lines(task, max_line_bytes)
    first_line += skipped
    block_size = arrow_block_size(block, first_line, task.path, max_line_bytes)
    if fmt == "csv":
        if task.start == 0:  # The header line.
            cut = block.find(b"\n")
            block = b"" if cut < 0 else block[cut + 1:]
            first_line += 1
        return csv_block_rows(block, first_line, header, columns, task.file_index,
                              task.path, block_size)
    return jsonl_block_rows(block, first_line, columns, task.file_index, task.path,
                            strip_bom=task.start == 0, block_size=block_size)
