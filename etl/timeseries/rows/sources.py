"""Time-series inputs: what a long-format row means, the input files, the labels file.

Long format: one row per (series id, timestamp, value columns...). Timestamps are
numbers (any unit) or ISO 8601 dates/times (naive ones are taken as UTC), or texts in
the ``--timestamp_format`` given (``Columns.timestamp_format``). Empty,
``"nan"`` and null values are *missing* (handled later by the missing-value policy);
anything else that is not a finite number is rejected as ``unparsable_value``, and a
number float32 cannot hold as ``value_out_of_range``. A categorical column's value is
its text, stripped (``category_text``; empty or null: ``""``, a category of its own).
``parse_row`` is the reference
for one row; ``etl/timeseries/rows/parsing.py`` reads whole blocks column-wise by these rules.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import math
from collections.abc import Mapping, Sequence
from typing import Any

from etl.core import column_hints, dead_letters
from etl.core.dead_letters import Rejection
from etl.core.io import storage
from etl.core.io.text_rows import BOM, csv_fields, parse_csv_line, parse_jsonl_line

REJECTED = dead_letters.REJECTED
NUMERIC = "numeric"
DATETIME = "datetime"
# Compared case-insensitively.
_MISSING_TEXT = frozenset({"", "nan", "null", "none", "na", "n/a"})


@dataclasses.dataclass(frozen=True)
class Columns:
    """Which input columns hold the series id, the timestamp, the (real) values and
    the categoricals."""

    series_id: str
    timestamp: str
    values: tuple[str, ...]
    categoricals: tuple[str, ...] = ()
    # --timestamp_format: the strptime format timestamp texts are written in; None:
    # numbers or ISO 8601.
    timestamp_format: str | None = None
    # The flag that named the value and categorical columns → its columns, as typed
    # (for errors); empty: --value_columns named them all.
    value_flags: tuple[tuple[str, tuple[str, ...]], ...] = ()

    def named_columns(self) -> dict[str, tuple[str, ...]]:
        """The flag that names each column read → its columns (for errors)."""
        return {"--series_id_column": (self.series_id,),
                "--timestamp_column": (self.timestamp,),
                **(dict(self.value_flags)
                   or {"--value_columns": self.values + self.categoricals})}

    @property
    def names(self) -> tuple[str, ...]:
        """Every column read, each once, in this order."""
        return tuple(dict.fromkeys((self.series_id, self.timestamp, *self.values,
                                    *self.categoricals)))


@dataclasses.dataclass(frozen=True)
class Row:
    """One parsed observation. ``values`` holds NaN for missing entries."""

    series_id: str
    time: float  # seconds since the epoch (DATETIME) or the number as given (NUMERIC)
    time_text: str  # the timestamp as written, used in keys and window_start
    time_kind: str  # NUMERIC or DATETIME
    values: tuple[float, ...]
    source: str
    categories: tuple[str, ...] = ()  # the categorical columns' texts


def _looks_numeric(text: str) -> bool:
    try:
        float(text)
    except (ValueError, OverflowError):
        return False
    return True


def _finite_float(value: Any) -> float:
    """``float(value)`` for a finite number written plainly.

    Raises:
        ValueError: for non-numbers, infinities, NaN, numbers too large for a float,
            and digit separators (``1_000``: Python accepts them, CSV writers do not
            mean them).
    """
    if isinstance(value, str) and "_" in value:
        raise ValueError(f"not a plain number: {value!r}")
    try:
        number = float(value)
    except OverflowError:
        raise ValueError(f"number too large for a float: {str(value)[:40]}...") from None
    if not math.isfinite(number):
        raise ValueError(f"not a finite number: {value!r}")
    return number


def parse_timestamp(value: Any, fmt: str | None = None) -> tuple[float, str, str]:
    """``(time, text, kind)`` of a timestamp value.

    With ``fmt`` (``--timestamp_format``, a ``datetime.strptime`` format), every value
    but a date or datetime object is read as text in that format (naive = UTC).

    Example:
        >>> parse_timestamp("01/31/1959", "%m/%d/%Y")
        (-344563200.0, '01/31/1959', 'datetime')

    Raises:
        ValueError: if it is neither a finite number nor an ISO 8601 date/time, or
            (with ``fmt``) does not match ``fmt``.
    """
    if isinstance(value, bool) or value is None:
        raise ValueError(f"not a timestamp: {value!r}")
    if fmt is not None and not isinstance(value, dt.date):
        text = str(value).strip()
        try:
            moment = dt.datetime.strptime(text, fmt)
        except ValueError:
            raise ValueError(f"does not match --timestamp_format={fmt}: {text!r}") from None
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=dt.UTC)
        return moment.timestamp(), text, DATETIME
    if isinstance(value, (int, float)):
        number = _finite_float(value)
        return number, str(value), NUMERIC
    if isinstance(value, dt.datetime):
        moment = value if value.tzinfo else value.replace(tzinfo=dt.UTC)
        return moment.timestamp(), value.isoformat(), DATETIME
    if isinstance(value, dt.date):
        moment = dt.datetime(value.year, value.month, value.day, tzinfo=dt.UTC)
        return moment.timestamp(), value.isoformat(), DATETIME
    text = str(value).strip()
    if _looks_numeric(text):
        return _finite_float(text), text, NUMERIC
    try:
        moment = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"not a number or ISO 8601 date/time: {text!r}") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=dt.UTC)
    return moment.timestamp(), text, DATETIME


def parse_value(value: Any) -> float:
    """A value as float; NaN for missing.

    Raises:
        ValueError: for text that is not a number, or an infinite number.
    """
    if value is None:
        return math.nan
    if isinstance(value, bool):
        raise ValueError(f"boolean is not a value: {value!r}")
    if isinstance(value, float) and math.isnan(value):
        return math.nan
    if not isinstance(value, (int, float)):
        value = str(value).strip()
        if value.lower() in _MISSING_TEXT:
            return math.nan
    return _finite_float(value)


def category_text(value: Any) -> str:
    """A categorical value as text: ``str(value)`` stripped; ``""`` for null."""
    return "" if value is None else str(value).strip()


# Finite float64 values at least this large in magnitude round to ±inf as float32,
# the dtype windows are stored in: 2**128 - 2**103, halfway between float32's largest
# value (2**128 - 2**104) and 2**128 (ties round to even, i.e. up).
FLOAT32_OVERFLOW = 3.4028235677973366e38


def fits_float32(value: float) -> bool:
    """True if ``value`` (finite, or NaN for missing) is not rounded to ±inf as
    float32."""
    return not abs(value) >= FLOAT32_OVERFLOW


def parse_row(row: Mapping[str, Any], columns: Columns, source: str) -> Row | Rejection:
    """Validates one input row (already a mapping of column → value).

    This is the reference for every row: the columnar readers take a faster path only
    where it gives the same result, and call this for anything else.
    """
    series = row.get(columns.series_id)
    if series is None or not str(series).strip():
        return Rejection(key=source, source=source, reason=dead_letters.MISSING_SERIES_ID,
                         message=f"Row has no {columns.series_id!r} value.")
    series_id = str(series).strip()
    key = f"{series_id}@{row.get(columns.timestamp)}"
    try:
        time, time_text, kind = parse_timestamp(row.get(columns.timestamp),
                                                columns.timestamp_format)
    except ValueError as e:
        return Rejection(key=key, source=source, reason=dead_letters.UNPARSABLE_TIMESTAMP,
                         message=f"Column {columns.timestamp!r}: {e}")
    values = []
    for column in columns.values:
        try:
            values.append(parse_value(row.get(column)))
        except ValueError as e:
            return Rejection(key=key, source=source, reason=dead_letters.UNPARSABLE_VALUE,
                             message=f"Column {column!r}: {e}")
        if not fits_float32(values[-1]):
            return Rejection(key=key, source=source, reason=dead_letters.VALUE_OUT_OF_RANGE,
                             message=f"Column {column!r}: {values[-1]!r} does not fit "
                                     f"float32 (largest finite 3.4028235e+38), the dtype "
                                     f"windows are stored in.")
    return Row(series_id=series_id, time=time, time_text=time_text, time_kind=kind,
               values=tuple(values), source=source,
               categories=tuple(category_text(row.get(c)) for c in columns.categoricals))


def input_format(path: str) -> str:
    """``"csv"``, ``"jsonl"`` or ``"parquet"`` from the file name or glob.

    Raises:
        ValueError: for any other extension.
    """
    lowered = path.lower()
    for suffix, name in ((".csv", "csv"), (".jsonl", "jsonl"), (".json", "jsonl"),
                         (".parquet", "parquet")):
        if lowered.endswith(suffix):
            return name
    raise ValueError(f"--input {path!r} must end in .csv, .jsonl or .parquet.")


def matched_files(pattern: str) -> list[storage.FileInfo]:
    """Files matching ``pattern`` (a path or glob), sorted, with their sizes and
    modification times.

    Raises:
        ValueError: if nothing matches, or a match is not a regular file (a FIFO,
            socket or device, found by ``stat`` and never opened: reading one can
            block forever).
    """
    files = storage.glob(pattern)
    if not files:
        raise ValueError(f"--input {pattern!r} matches no file.")
    for info in files:
        kind = storage.special_kind(info.path)
        if kind is not None:
            raise ValueError(f"--input {pattern!r} matches {info.path!r}, a {kind}, not a "
                             f"regular file (reading one can block forever or never "
                             f"end): remove it or narrow --input.")
    return files


def check_columns(names: Sequence[str], columns: Columns, path: str) -> None:
    """Raises ValueError naming the required columns a file lacks (``names``: its
    CSV header or Parquet schema)."""
    missing = [c for c in columns.names if c not in names]
    if missing:
        hint = column_hints.pass_flags_hint(columns.named_columns(), names)
        raise ValueError(f"{path!r} lacks column(s) {missing}; its columns are "
                         f"{list(names)}{hint}.")


def read_labels(path: str, series_column: str, label_column: str = "label"
                ) -> tuple[dict[str, str], list[Rejection]]:
    """Reads the series → label file (CSV with a header, or JSONL), on the driver.

    A series listed twice with different labels is rejected (``conflicting_label``);
    an empty label is rejected (``missing_label``).

    Raises:
        ValueError: if the file lacks the series or label column.
    """
    fmt = input_format(path)
    lines = [line.rstrip("\r") for line in storage.read_text(path).split("\n")]
    if lines and not lines[-1]:
        lines.pop()  # The text ends with a line break.
    if lines:
        lines[0] = lines[0].lstrip(BOM)
    rows: list[tuple[str, dict[str, Any] | None]] = []
    if fmt == "csv":
        header = csv_fields(lines[0]) if lines else ()
        if series_column not in header or label_column not in header:
            raise ValueError(f"Labels file {path!r} needs columns {series_column!r} and "
                             f"{label_column!r}; its header is {list(header)}.")
        rows = [(f"{path}:{n}", parse_csv_line(line, header))
                for n, line in enumerate(lines[1:], start=2) if line.strip()]
    elif fmt == "jsonl":
        rows = [(f"{path}:{n}", parse_jsonl_line(line))
                for n, line in enumerate(lines, start=1) if line.strip()]
        objects = [row for _, row in rows if row is not None]
        for column in (series_column, label_column):
            if objects and not any(column in row for row in objects):
                raise ValueError(f"Labels file {path!r} has no {column!r} field in any "
                                 f"line.")
    else:
        raise ValueError(f"Labels file {path!r} must be .csv or .jsonl.")
    labels: dict[str, str] = {}
    rejected: list[Rejection] = []
    conflicting: set[str] = set()
    for source, row in rows:
        if row is None or not str(row.get(series_column) or "").strip():
            rejected.append(Rejection(key=source, source=source,
                                      reason=dead_letters.MALFORMED_ROW,
                                      message="Labels row without a series id."))
            continue
        series_id = str(row[series_column]).strip()
        label = row.get(label_column)
        if label is None or not str(label).strip():
            rejected.append(Rejection(key=series_id, source=source,
                                      reason=dead_letters.MISSING_LABEL,
                                      message="Empty label in the labels file."))
            continue
        label = str(label).strip()
        if series_id in labels and labels[series_id] != label:
            conflicting.add(series_id)
        labels.setdefault(series_id, label)
    for series_id in sorted(conflicting):
        del labels[series_id]
        rejected.append(Rejection(key=series_id, source=path,
                                  reason=dead_letters.CONFLICTING_LABEL,
                                  message="The labels file gives this series two labels."))
    return labels, rejected

