"""Rows of CSV and JSON Lines text files: the parsing both jobs share.

A CSV file starts with a header line naming its columns; a JSON Lines file holds one
object per line; a UTF-8 byte-order mark before the first line is ignored. The
time-series job reads one line as one row (``parse_csv_line``, ``parse_jsonl_line``
on each line). An image manifest is read as RFC 4180 CSV (:func:`numbered_rows`): a
quoted field may hold commas, doubled quotes and line breaks, so a row may span
lines. Blank lines are no rows. A row that is not well formed parses to None, which
each job turns into its own dead letter (``malformed_manifest_row``,
``malformed_row``).
"""

from __future__ import annotations

import csv
import dataclasses
import json
import re
from collections.abc import Iterable, Iterator
from typing import IO, Any

from etl.core.io import storage

# Byte-order mark that Excel's "CSV UTF-8" and some editors put before the first line.
BOM = "\ufeff"
# A byte that is not UTF-8, as Python's surrogateescape holds it (U+DC00 + the byte).
_UNDECODABLE = re.compile("[\udc80-\udcff]")


def csv_fields(line: str) -> tuple[str, ...]:
    """Fields of a CSV header line, stripped of surrounding whitespace.

    Raises:
        ValueError: if the csv module cannot parse it (e.g. a stray carriage return).
    """
    try:
        return tuple(c.strip() for c in next(csv.reader([line]), []))
    except csv.Error as e:
        raise ValueError(f"Unreadable CSV header {line[:80]!r}: {e}") from None


def read_csv_header(path: str) -> tuple[str, ...]:
    """The column names on the first line of the CSV file at ``path`` (any filesystem
    ``etl.core.io.storage`` reads).

    Raises:
        ValueError: if the header line cannot be parsed, or is not UTF-8.
    """
    with storage.open_read(path) as f:
        line = f.readline()
    try:
        return csv_fields(line.decode("utf-8").lstrip(BOM))
    except UnicodeDecodeError as e:
        raise ValueError(f"Header is not UTF-8 text: {e}") from None


def parse_csv_line(line: str, header: tuple[str, ...]) -> dict[str, str] | None:
    """One CSV data line as a dict, or None if it is not a well-formed row (column
    count differs, or a stray carriage return the csv module refuses).

    With a column named twice in ``header``, the later field wins.
    """
    try:
        values = next(csv.reader([line]), [])
    except csv.Error:
        # A field over csv.field_size_limit() (128 KiB): a line without quotes or
        # stray carriage returns is its commas' fields, whatever their length (the
        # time-series job bounds lines by --max_line_mb).
        bare = line.rstrip("\r\n")
        if '"' in bare or "\r" in bare or len(bare) <= csv.field_size_limit():
            return None
        values = bare.split(",")
    if len(values) != len(header):
        return None
    return dict(zip(header, values, strict=True))


def parse_jsonl_line(line: str) -> dict[str, Any] | None:
    """One JSON Lines object, or None if the line is not a JSON object."""
    try:
        value = json.loads(line)
    except json.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


@dataclasses.dataclass(frozen=True)
class NumberedRow:
    """One row of a text file as written: the line it starts on (1-based, the
    header counted), the line it ends on, and its text without the final line break.

    ``problem`` says why the row cannot be one whatever its parser: it holds bytes
    that are not UTF-8 (then ``text`` shows each such byte as ``\\xNN``).
    """

    line: int
    last_line: int
    text: str
    problem: str | None = None


def numbered_rows(path: str, skip_header: bool, csv_quoting: bool) -> Iterator[NumberedRow]:
    """Every non-blank row of the CSV or JSON Lines file at ``path``, streamed.

    Lines end at a line feed only. With ``csv_quoting`` a row ends where Python's
    ``csv`` module ends it (RFC 4180: a line break inside a quoted field continues the
    row; a quote inside an unquoted field is text), and a row it refuses (a stray
    carriage return, a field over ``csv.field_size_limit()``) is handed on as the
    text it read, which ``parse_csv_line`` refuses too; without, each line is a row.
    The first line is left out with ``skip_header``, else its byte-order mark is
    removed.

    Example:
        >>> [r.text for r in numbered_rows("list.csv", True, True)]  # doctest: +SKIP
        ['cat/a.png,cat', 'cat/b.png,"two\\nlines"']
    """
    with storage.open_read(path) as f:
        lines = _decoded_lines(f, skip_header)
        rows = _csv_rows(lines) if csv_quoting else ([item] for item in lines)
        for row_lines in rows:
            row = _numbered_row(row_lines)
            if row.text.strip():
                yield row


def _decoded_lines(f: IO[bytes], skip_header: bool) -> Iterator[tuple[int, str]]:
    """``(line number, line)``, line breaks kept; bytes that are not UTF-8 held as
    surrogate escapes (decoding line by line is exact: a line feed byte is never part
    of a multi-byte character)."""
    for number, raw in enumerate(f, start=1):
        line = raw.decode("utf-8", "surrogateescape")
        if number == 1:
            if skip_header:
                continue
            line = line.lstrip(BOM)
        yield number, line


def _csv_rows(lines: Iterable[tuple[int, str]]) -> Iterator[list[tuple[int, str]]]:
    """The lines of each CSV row, as the ``csv`` module reads them one line at a time
    (it never reads past the row it is in)."""
    read: list[tuple[int, str]] = []

    def feed() -> Iterator[str]:
        for item in lines:
            read.append(item)
            yield item[1]

    reader = csv.reader(feed())
    while True:
        read.clear()
        try:
            next(reader)
        except StopIteration:
            return
        except csv.Error:
            pass  # The reader starts afresh on the next line; the row is refused later.
        if read:
            yield list(read)


def _numbered_row(lines: list[tuple[int, str]]) -> NumberedRow:
    text = "".join(line for _, line in lines).rstrip("\r\n")
    first, last = lines[0][0], lines[-1][0]
    bad = _UNDECODABLE.search(text)
    if bad is None:
        return NumberedRow(first, last, text)
    where = next(number for number, line in lines if _UNDECODABLE.search(line))
    shown = text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    return NumberedRow(first, last, shown,
                       f"not UTF-8 text (byte 0x{ord(bad[0]) - 0xDC00:02X} on line {where})")
