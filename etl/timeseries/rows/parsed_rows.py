"""``ParsedRows``: a range's rows as validated columns, decided as ``parse_row`` would.

``etl.timeseries.rows.sources.parse_row`` is the reference for what a row means. The
column-wise path here only decides rows it provably decides the same way (numbers
matching a plain decimal pattern, numeric Arrow types, timestamps parsed once per
distinct value by ``parse_timestamp`` itself); every other row goes through
``parse_row``, so rejections, their messages and the row accounting are exactly the
row path's (both paths cut a key or message past ``MAX_REJECTION_TEXT`` characters).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from etl.core.dead_letters import Rejection
from etl.timeseries.rows.sources import (
    DATETIME,
    FLOAT32_OVERFLOW,
    Columns,
    Row,
    category_text,
    parse_row,
    parse_timestamp,
)
from etl.timeseries.rows.time_texts import DATETIME_BIT, NUMERIC_BIT

# RE2 patterns (pyarrow.compute): a plain decimal number, a missing-value word.
_PLAIN_NUMBER = r"^ *[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)? *$"
_MISSING_WORD = r"^ *((?i)nan|null|none|na|n/a)? *$"
# A rejection's key and message quote the series id, timestamp or value they hold,
# which a long line makes megabytes long; the dead letter and the manifest's examples
# keep this many characters of them (a malformed line shows its first 200).
MAX_REJECTION_TEXT = 1000


def _cut(text: str) -> str:
    if len(text) <= MAX_REJECTION_TEXT:
        return text
    return f"{text[:MAX_REJECTION_TEXT]}... ({len(text)} characters)"


@dataclasses.dataclass
class ParsedRows:
    """Rows of one range that parsed, as columns; rejections of the others."""

    series_ids: list[str]  # distinct ids; codes index into it
    codes: np.ndarray  # int64 [n]
    times: np.ndarray  # float64 [n]
    kinds: np.ndarray  # uint8 [n], NUMERIC_BIT or DATETIME_BIT
    text_dictionary: list[str]  # distinct timestamps as written (stripped)
    text_codes: np.ndarray  # int64 [n] into text_dictionary
    values: np.ndarray  # float64 [n, F + Fc]: reals, then categorical codes
    positions: np.ndarray  # int64 [n]
    rejections: list[Rejection]
    categories: list[str] = dataclasses.field(default_factory=list)  # codes index it
    num_categoricals: int = 0  # the last columns of values


class RowsBuilder:
    """Gathers the column-wise path's rows and ``parse_row``'s, in any order."""

    def __init__(self, columns: Columns) -> None:
        self._num_categoricals = len(columns.categoricals)
        self._num_features = len(columns.values) + self._num_categoricals
        self._ids: dict[str, int] = {}
        self._texts: dict[str, int] = {}
        self._categories: dict[str, int] = {}
        self._parts: list[tuple[np.ndarray, ...]] = []
        self._slow: list[tuple[int, Row]] = []
        self.rejections: list[Rejection] = []

    def code(self, series_id: str) -> int:
        return self._ids.setdefault(series_id, len(self._ids))

    def text_code(self, text: str) -> int:
        return self._texts.setdefault(text, len(self._texts))

    def category_code(self, text: str) -> int:
        return self._categories.setdefault(text, len(self._categories))

    def add_columns(self, codes: np.ndarray, times: np.ndarray, kinds: np.ndarray,
                    text_codes: np.ndarray, values: np.ndarray, positions: np.ndarray
                    ) -> None:
        self._parts.append((codes, times, kinds, text_codes, values, positions))

    def add_result(self, position: int, result: Row | Rejection) -> None:
        if isinstance(result, Rejection):
            if max(len(result.key), len(result.message)) > MAX_REJECTION_TEXT:
                result = dataclasses.replace(result, key=_cut(result.key),
                                             message=_cut(result.message))
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
                np.array([(*r.values, *map(self.category_code, r.categories))
                          for r in rows], np.float64).reshape(len(rows), self._num_features),
                np.array([p for p, _ in self._slow], np.int64)))
        if not parts:
            parts = [(np.zeros(0, np.int64), np.zeros(0), np.zeros(0, np.uint8),
                      np.zeros(0, np.int64), np.zeros((0, self._num_features)),
                      np.zeros(0, np.int64))]
        codes, times, kinds, text_codes, values, positions = (
            np.concatenate(c) for c in zip(*parts, strict=True))
        return ParsedRows(list(self._ids), codes, times, kinds, list(self._texts),
                          text_codes, values, positions, self.rejections,
                          list(self._categories), self._num_categoricals)


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


def add_table(builder: RowsBuilder, table: Mapping[str, pa.Array], columns: Columns,
              positions: np.ndarray, source_of: Callable[[int], str]) -> None:
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
            time, text, kind = parse_timestamp(value, columns.timestamp_format)
        except ValueError:
            continue
        parsed_times[k] = time
        parsed_kinds[k] = DATETIME_BIT if kind == DATETIME else NUMERIC_BIT
        parsed_texts[k] = builder.text_code(text)
    ok &= parsed_kinds[stamp_index] > 0

    num_values = len(columns.values)
    values = np.empty((n, num_values + len(columns.categoricals)))
    for f, name in enumerate(columns.values):
        column_values, decided = _fast_values(table[name])
        values[:, f] = column_values
        ok &= decided
    for f, name in enumerate(columns.categoricals, start=num_values):
        # Every Arrow type: each distinct value is read back as the Python object
        # parse_row would get, and made text by the same function. Index -1 (null)
        # reads the extra last entry.
        distinct, index = _distinct(table[name])
        texts = [*(category_text(value) for value in distinct), ""]
        values[:, f] = np.array([builder.category_code(t) for t in texts],
                                np.float64)[index]

    fast = np.flatnonzero(ok)
    fast_stamps = stamp_index[fast]
    builder.add_columns(codes[fast], parsed_times[fast_stamps], parsed_kinds[fast_stamps],
                        parsed_texts[fast_stamps], values[fast], positions[fast])
    slow = np.flatnonzero(~ok)
    if len(slow):
        needed = {name: table[name].take(pa.array(slow)).to_pylist()
                  for name in columns.names}
        for i, row_index in enumerate(slow.tolist()):
            row = {name: values_[i] for name, values_ in needed.items()}
            position = int(positions[row_index])
            builder.add_result(position, parse_row(row, columns, source_of(position)))
