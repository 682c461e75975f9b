"""Rows of CSV and JSON Lines text files, one physical line each: the parsing both jobs share.

A CSV file starts with a header line naming its columns; a JSON Lines file holds one
object per line. A line is one row (a quoted field cannot span lines), blank lines
are no rows, and a UTF-8 byte-order mark before the first line is ignored. A line
that is not a well-formed row parses to None, which each job turns into its own
dead letter (``malformed_manifest_row``, ``malformed_row``).
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator
from typing import Any

from etl.core import storage

# Byte-order mark that Excel's "CSV UTF-8" and some editors put before the first line.
BOM = "\ufeff"


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
    ``etl.core.storage`` reads).

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
        return None
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


def numbered_lines(path: str, skip_header: bool) -> Iterator[tuple[int, str]]:
    """``(line number, line)`` for every line of a text file, 1-based, without its
    line break; the first line is left out with ``skip_header``, else its byte-order
    mark is removed."""
    # newline="\n": a line ends at a line feed only, as it does for the row parsers.
    with storage.open_read(path) as raw, io.TextIOWrapper(raw, encoding="utf-8",
                                                          newline="\n") as f:
        for number, line in enumerate(f, start=1):
            if number == 1:
                if skip_header:
                    continue
                line = line.lstrip(BOM)
            yield number, line.rstrip("\r\n")
