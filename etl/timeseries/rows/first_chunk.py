"""The first rows of each input file, read on the driver before the job runs.

A file whose first chunk rejects every row for one reason (dates in another format,
the wrong column named) would otherwise run the whole pipeline to reject every row.
``check_first_chunks`` stops the job first, in one line: the reason, an example value
and what to pass (``--timestamp_format=%m/%d/%Y`` only when that format reads the
examples). A file whose first rows are partly good runs, and its bad rows are dead
letters as always. The rows are parsed exactly as the read step parses them
(``parsing``, ``parsed_rows``).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from etl.core import column_hints, dead_letters
from etl.core.dead_letters import Rejection
from etl.core.io import storage, text_rows
from etl.timeseries.rows.parsed_rows import RowsBuilder, add_table
from etl.timeseries.rows.parsing import csv_block_rows, jsonl_block_rows
from etl.timeseries.rows.ranges import POSITION_FILE_STRIDE
from etl.timeseries.rows.read import InputPlan
from etl.timeseries.rows.sources import FLOAT32_OVERFLOW, Columns, parse_timestamp, parse_value

# The first chunk: the whole lines in a text file's first 64 KiB (about a thousand
# rows), or a Parquet file's first 1,000 rows; of the first 8 files a glob matches
# (a wrong format or column shows in every file, and each costs a read here).
FIRST_CHUNK_BYTES = 64 * 1024
FIRST_CHUNK_ROWS = 1000
FILES_CHECKED = 8
# Rows kept as mappings for the example values and the formats tried.
_SAMPLE_ROWS = 200
# strptime formats tried on timestamps that are not numbers or ISO 8601, in this
# order: month-first before day-first where both read every example.
CANDIDATE_FORMATS = (
    "%m/%d/%Y", "%d/%m/%Y", "%m/%d/%Y %H:%M", "%d/%m/%Y %H:%M", "%m/%d/%Y %H:%M:%S",
    "%d/%m/%Y %H:%M:%S", "%m/%d/%y", "%d/%m/%y", "%d.%m.%Y", "%d.%m.%Y %H:%M",
    "%d.%m.%Y %H:%M:%S", "%Y/%m/%d", "%Y/%m/%d %H:%M:%S", "%m-%d-%Y", "%d-%m-%Y",
    "%Y-%m", "%Y.%m.%d", "%d %b %Y", "%d-%b-%Y", "%b %d, %Y", "%b %Y", "%Y%m%d%H%M%S",
)


@dataclasses.dataclass(frozen=True)
class FirstChunk:
    """What the first chunk of one file held."""

    path: str
    rows_parsed: int
    rejections: tuple[Rejection, ...]
    sample: tuple[Mapping[str, Any], ...]  # its first rows as read, by column


def _text_sample(block: bytes, fmt: str, header: tuple[str, ...]
                 ) -> list[Mapping[str, Any]]:
    rows: list[Mapping[str, Any]] = []
    for raw in block.split(b"\n"):
        if len(rows) == _SAMPLE_ROWS:
            break
        try:
            line = raw.rstrip(b"\r").decode("utf-8").lstrip(text_rows.BOM)
        except UnicodeDecodeError:
            continue
        if not line.strip():
            continue
        row = (text_rows.parse_csv_line(line, header) if fmt == "csv"
               else text_rows.parse_jsonl_line(line))
        if row is not None:
            rows.append(row)
    return rows


def read_first_chunk(plan: InputPlan, file_index: int, columns: Columns) -> FirstChunk:
    """Parses the first chunk of file ``file_index`` of ``plan`` as the read step would
    (its whole lines only)."""
    path = plan.files[file_index]
    if plan.fmt == "parquet":
        import pyarrow.parquet as pq

        with storage.open_read(path) as f:
            batch = next(pq.ParquetFile(f).iter_batches(
                batch_size=FIRST_CHUNK_ROWS, columns=list(columns.names)), None)
        if batch is None:
            return FirstChunk(path, 0, (), ())
        builder = RowsBuilder(columns)
        base = file_index * POSITION_FILE_STRIDE
        add_table(builder, {name: batch.column(name) for name in columns.names}, columns,
                  base + 1 + np.arange(batch.num_rows, dtype=np.int64),
                  lambda position: f"{path}:row{position - base}")
        parsed = builder.build()
        sample = pa.Table.from_batches([batch.slice(0, _SAMPLE_ROWS)]).to_pylist()
        return FirstChunk(path, len(parsed.codes), tuple(parsed.rejections), tuple(sample))
    with storage.open_read(path) as f:
        block = f.read(FIRST_CHUNK_BYTES)
    if len(block) == FIRST_CHUNK_BYTES:
        # Whole lines only; a line longer than the chunk is left to the read step
        # (and to --max_line_mb).
        block = block[:block.rfind(b"\n") + 1]
    header: tuple[str, ...] = ()
    if plan.fmt == "csv":
        header = plan.headers[file_index]
        cut = block.find(b"\n")
        block = b"" if cut < 0 else block[cut + 1:]
        parsed = csv_block_rows(block, 2, header, columns, file_index, path)
    else:
        parsed = jsonl_block_rows(block, 1, columns, file_index, path, strip_bom=True)
    return FirstChunk(path, len(parsed.codes), tuple(parsed.rejections),
                      tuple(_text_sample(block, plan.fmt, header)))


def _reads_all(fmt: str, texts: Sequence[str]) -> bool:
    try:
        for text in texts:
            dt.datetime.strptime(text, fmt)
    except ValueError:
        return False
    return True


def suggest_timestamp_format(texts: Sequence[str]) -> str | None:
    """The first of ``CANDIDATE_FORMATS`` that reads every one of ``texts``, or None."""
    texts = [text.strip() for text in texts]
    if not texts:
        return None
    return next((fmt for fmt in CANDIDATE_FORMATS if _reads_all(fmt, texts)), None)


def _present(value: Any) -> bool:
    return value is not None and str(value).strip() != ""


def _no_values(name: str, flag: str, what: str, chunk: FirstChunk, columns: Columns
               ) -> str:
    """Why no row has a ``name`` value: a column the rows lack (the flag to pass with
    the closest column as its value), or one they leave empty."""
    available = list(chunk.sample[0]) if chunk.sample else []
    if available and name not in available:
        hint = column_hints.pass_flags_hint(columns.named_columns(), available)
        return f"no row has a {name!r} column; the rows' columns are {available}{hint}"
    return f"no row has a {name!r} value; pass {flag} naming the column of {what}"


def _timestamp_reason(chunk: FirstChunk, columns: Columns) -> str:
    name, fmt = columns.timestamp, columns.timestamp_format
    values = [row.get(name) for row in chunk.sample if _present(row.get(name))]
    if not values:
        return _no_values(name, "--timestamp_column", "timestamps", chunk, columns)
    texts = list(dict.fromkeys(str(value).strip() for value in values))
    example = texts[0]
    if fmt is not None:
        try:
            for text in texts:
                parse_timestamp(text)
        except ValueError:
            pass
        else:
            return (f"timestamps like {example!r} do not match --timestamp_format={fmt}; "
                    f"they are ISO 8601 or numbers: leave --timestamp_format out")
        what = f"do not match --timestamp_format={fmt}"
    else:
        what = "are not ISO 8601 (nor numbers)"
    suggested = suggest_timestamp_format(texts)
    if suggested is not None and suggested != fmt:
        fix = f"pass --timestamp_format={suggested}"
    else:
        fix = ("pass --timestamp_format with the strptime format they are written in "
               "(e.g. %d.%m.%Y %H:%M)")
    return f"timestamps like {example!r} {what}; {fix}"


def _first_bad_value(chunk: FirstChunk, columns: Columns, reason: str
                     ) -> tuple[str, Any] | None:
    """``(column, value)``: the first value of the sample rejected for ``reason``."""
    for row in chunk.sample:
        for name in columns.values:
            try:
                number = parse_value(row.get(name))
            except ValueError:
                if reason == dead_letters.UNPARSABLE_VALUE:
                    return name, row.get(name)
                continue
            if reason == dead_letters.VALUE_OUT_OF_RANGE and abs(number) >= FLOAT32_OVERFLOW:
                return name, row.get(name)
    return None


def _explain(chunk: FirstChunk, columns: Columns, reason: str) -> str:
    """The cause and its fix, for first rows all rejected for ``reason``."""
    if reason == dead_letters.UNPARSABLE_TIMESTAMP:
        return _timestamp_reason(chunk, columns)
    if reason == dead_letters.MISSING_SERIES_ID:
        return _no_values(columns.series_id, "--series_id_column", "series ids", chunk,
                          columns)
    bad = _first_bad_value(chunk, columns, reason)
    if bad is not None and reason == dead_letters.UNPARSABLE_VALUE:
        return (f"column {bad[0]!r} holds values like {bad[1]!r}, not numbers; name "
                f"numeric columns in --value_columns (a categorical column goes in "
                f"--known_categorical_columns or --static_categorical_columns)")
    if bad is not None and reason == dead_letters.VALUE_OUT_OF_RANGE:
        return (f"column {bad[0]!r} holds values like {bad[1]!r}, beyond float32 "
                f"(largest finite 3.4028235e+38), the dtype windows are stored in; "
                f"rescale the column")
    return chunk.rejections[0].message


def first_chunk_error(chunk: FirstChunk, columns: Columns) -> str | None:
    """The one-line error for a first chunk whose rows were all rejected for one
    reason; None for any other (some row parsed, no row, several reasons)."""
    reasons = {rejection.reason for rejection in chunk.rejections}
    if chunk.rows_parsed or len(reasons) != 1:
        return None
    reason = reasons.pop()
    return (f"{_explain(chunk, columns, reason)} (the first {len(chunk.rejections)} "
            f"row(s) of {chunk.path!r} were all rejected as {reason}; nothing was run "
            f"or written).")


def check_first_chunks(plan: InputPlan, columns: Columns) -> None:
    """Reads the first chunk of each of the first ``FILES_CHECKED`` files of ``plan``.

    Raises:
        ValueError: for the first file whose first chunk rejects every row for one
            reason, saying why, with an example value and the flag that fixes it.
    """
    for file_index in range(min(len(plan.files), FILES_CHECKED)):
        error = first_chunk_error(read_first_chunk(plan, file_index, columns), columns)
        if error is not None:
            raise ValueError(error)
