"""Unit tests of etl/timeseries/rows/parsing.py and parsed_rows.py: blocks → ParsedRows.

The column-wise parse of generated messy input is checked against ``parse_row`` (the
one-row reference) applied line by line: the same rows, the same rejections.
"""

from __future__ import annotations

import datetime as dt
import json
import math

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from etl.core import dead_letters
from etl.core.dead_letters import Rejection
from etl.core.io import text_rows
from etl.timeseries.rows import parsed_rows, parsing
from etl.timeseries.rows.ranges import (
    count_line_breaks,
    first_line_numbers,
    line_too_long,
    plan_parquet_ranges,
    plan_text_ranges,
)
from etl.timeseries.rows.sources import Columns, Row, category_text, parse_row
from etl.timeseries.rows.time_texts import DATETIME_BIT, NUMERIC_BIT

_KINDS = {NUMERIC_BIT: "numeric", DATETIME_BIT: "datetime"}


_FIELDS = st.one_of(
    st.sampled_from(["", " ", "nan", " NaN ", "NA", "n/a", "null", "None", "inf", "-inf",
                     "1e39", "-3.5e38", "3.4028235e38", "1_000", "+5", ".5", "5.", "1e-400",
                     "2024-01-02", "2024-01-02 03:04:05", "2024-01-02T03:04:05Z",
                     "2024-02-30", "abc", "0x10", "\t7", "١٢", "é", " a ", "12345678901234567890"]),
    st.integers(-10**6, 10**6).map(str),
    st.floats(allow_nan=False, allow_infinity=False, width=64).map(repr),
    st.text(alphabet="0123456789.eE+- ", max_size=8),
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=st.lists(st.tuples(_FIELDS, _FIELDS, _FIELDS, _FIELDS), min_size=1, max_size=30))
def test_csv_block_rows_agree_with_parse_row(rows):
    lines = [",".join(f.replace(",", ";").replace('"', "'") for f in row) for row in rows]
    _check_csv_lines(lines, Columns("id", "ts", ("a", "b")), ("id", "ts", "a", "b"))


# A field as CSV writers quote it, or quoted in ways only the csv module reads.
_QUOTED = st.one_of(
    _FIELDS.map(lambda f: f.replace('"', "'")),
    _FIELDS.map(lambda f: '"' + f.replace('"', "'") + '"'),
    st.sampled_from(['"a,b"', '""', '" 7 "', '"1,5"', '"2024-01-02"', '"a""b"', 'a"b',
                     '"a"b', ' "a"', '"a" ', '"a', '"é"', '"\t7"', '","']),
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=st.lists(st.tuples(_QUOTED, _QUOTED, _QUOTED, _QUOTED, _QUOTED), min_size=1,
                     max_size=30), crlf=st.booleans())
def test_quoted_csv_block_rows_agree_with_parse_row(rows, crlf):
    """Simply quoted lines go column-wise, the others line by line: the same rows."""
    lines = [",".join(row) for row in rows]
    _check_csv_lines(lines, Columns("id", "ts", ("a", "b"), ("c",)),
                     ("id", "ts", "a", "b", "c"), "\r\n" if crlf else "\n")


@pytest.mark.parametrize("line_break", ["\n", "\r\n"])
def test_quoted_csv_as_writers_quote_it_takes_the_column_path(monkeypatch, line_break):
    # R's write.csv and pyarrow quote every text; pandas quotes texts with commas. Each
    # such line, and a block of them, is read column-wise: no line alone.
    lines = ['"s1","2024-01-02",1.5,"x, y",""', 's1,2024-01-03,"2","a",b',
             '"s2","2024-01-02",,"","q"'] * 3
    calls = []
    for module in (parsing, parsed_rows):
        monkeypatch.setattr(module, "parse_row",
                            lambda *args: calls.append(args) or parse_row(*args))
    header = ("id", "ts", "a", "b", "c")
    block = line_break.join(lines) + line_break
    odd = 's3,2024-01-04,1,"a"b",c'  # the csv module reads 'ab"'
    for text, rows in ((block, 9), (block + odd + line_break, 10)):
        parsed = parsing.csv_block_rows(text.encode(), 2, header,
                                        Columns("id", "ts", ("a",), ("b", "c")), 0, "in.csv")
        assert len(parsed.codes) == rows
    assert len(calls) == 1  # the odd line only
    assert sorted(set(_categories_by_position(parsed).values())) == [
        ("", "q"), ("a", "b"), ("ab\"", "c"), ("x, y", "")]
    _check_csv_lines(lines, Columns("id", "ts", ("a",), ("b", "c")), header, line_break)


def _check_csv_lines(lines: list[str], columns: Columns, header: tuple[str, ...],
                     line_break: str = "\n") -> None:
    """``csv_block_rows`` of the lines gives what ``parse_row`` gives line by line."""
    block = (line_break.join(lines) + line_break).encode()
    parsed = parsing.csv_block_rows(block, 2, header, columns, 0, "in.csv")
    expected_rows, expected_rejections = [], []
    for number, line in enumerate(lines, start=2):
        if not line.strip():
            continue
        row = text_rows.parse_csv_line(line, header)
        result = (Rejection(f"in.csv:{number}", f"in.csv:{number}",
                            dead_letters.MALFORMED_ROW, f"Cannot parse line: {line[:200]!r}")
                  if row is None else parse_row(row, columns, f"in.csv:{number}"))
        if isinstance(result, Row):
            expected_rows.append((result.series_id, result.time, result.time_text,
                                  result.time_kind,
                                  tuple("nan" if math.isnan(v) else v for v in result.values),
                                  result.categories, result.source))
        else:
            expected_rejections.append((result.key, result.source, result.reason,
                                        result.message))
    got_rows = []
    num_values = len(columns.values)
    for i in range(len(parsed.codes)):
        got_rows.append((
            parsed.series_ids[parsed.codes[i]], float(parsed.times[i]),
            parsed.text_dictionary[parsed.text_codes[i]],
            _KINDS[int(parsed.kinds[i])],
            tuple("nan" if math.isnan(v) else float(v) for v in parsed.values[i, :num_values]),
            tuple(parsed.categories[int(c)] for c in parsed.values[i, num_values:]),
            f"in.csv:{int(parsed.positions[i])}"))
    got_rejections = [(r.key, r.source, r.reason, r.message) for r in parsed.rejections]
    assert sorted(got_rows, key=repr) == sorted(expected_rows, key=repr)
    assert sorted(got_rejections) == sorted(expected_rejections)


def test_typed_parquet_columns_agree_with_parse_row(tmp_path):
    rng = np.random.default_rng(0)
    n = 300
    table = pa.table({
        "id": [rng.choice(["a", " b ", "", None, "c"]) for _ in range(n)],
        "t_int": pa.array([None if i % 17 == 0 else int(i) for i in range(n)], pa.int64()),
        "t_time": pa.array([dt.datetime(2024, 1, 1) + dt.timedelta(hours=int(i))
                            for i in range(n)], pa.timestamp("s")),
        "f64": pa.array([rng.choice([None, math.nan, math.inf, 1e39, 2.5, -1.0])
                         for _ in range(n)], pa.float64()),
        "f32": pa.array(rng.normal(size=n).astype(np.float32)),
        "i64": pa.array([rng.choice([None, 1, -2, 2**60]) for _ in range(n)], pa.int64()),
        "s": [rng.choice([None, "1.5", "abc", "nan", " 7 ", "1e39"]) for _ in range(n)],
        "b": [rng.choice([None, True, False]) for _ in range(n)],
    })
    path = str(tmp_path / "typed.parquet")
    pq.write_table(table, path, row_group_size=64)
    records = table.to_pylist()
    for timestamp, values in (("t_int", ("f64", "f32", "i64")), ("t_time", ("s", "b"))):
        columns = Columns("id", timestamp, values)
        got_rows, got_rejections = [], []
        for task in plan_parquet_ranges([path], columns):
            parsed = parsing.parquet_group_rows(task, columns)
            got_rejections += [(r.key, r.source, r.reason, r.message)
                               for r in parsed.rejections]
            got_rows += [(parsed.series_ids[parsed.codes[i]], float(parsed.times[i]),
                          parsed.text_dictionary[parsed.text_codes[i]],
                          tuple(np.where(np.isnan(parsed.values[i]), -123.0,
                                         parsed.values[i]).tolist()),
                          int(parsed.positions[i]))
                         for i in range(len(parsed.codes))]
        expected_rows, expected_rejections = [], []
        for number, record in enumerate(records, start=1):
            result = parse_row(record, columns, f"{path}:row{number}")
            if isinstance(result, Row):
                expected_rows.append((result.series_id, result.time, result.time_text,
                                      tuple(-123.0 if math.isnan(v) else v
                                            for v in result.values), number))
            else:
                expected_rejections.append((result.key, result.source, result.reason,
                                            result.message))
        assert sorted(got_rows, key=repr) == sorted(expected_rows, key=repr)
        assert sorted(got_rejections) == sorted(expected_rejections)



_JSON_VALUES = st.one_of(
    st.none(), st.booleans(), st.integers(-10**6, 10**6), st.integers(-2**70, 2**70),
    st.floats(allow_nan=False, allow_infinity=False), st.sampled_from(
        [1e39, -1e308, 0.5, 7.0, "", "nan", "NA", " 3 ", "x", "2024-01-02", "17", "é"]),
)
_JSON_ROWS = st.lists(st.fixed_dictionaries(
    {}, optional={"id": st.one_of(st.sampled_from(["a", "b", " c "]), _JSON_VALUES),
                  "ts": _JSON_VALUES, "v": _JSON_VALUES, "w": _JSON_VALUES,
                  "other": _JSON_VALUES}), min_size=1, max_size=25)


def _reference_rows(lines: list[str], columns: Columns, path: str):
    rows, rejections = [], []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        row = text_rows.parse_jsonl_line(line)
        source = f"{path}:{number}"
        result = (Rejection(source, source, dead_letters.MALFORMED_ROW,
                            f"Cannot parse line: {line[:200]!r}") if row is None
                  else parse_row(row, columns, source))
        if isinstance(result, Row):
            rows.append((result.series_id, result.time, result.time_text, result.time_kind,
                         tuple("nan" if math.isnan(v) else v for v in result.values),
                         number))
        else:
            rejections.append((result.key, result.source, result.reason, result.message))
    return sorted(rows, key=repr), sorted(rejections)


def _parsed_rows(parsed):
    rows = [(parsed.series_ids[parsed.codes[i]], float(parsed.times[i]),
             parsed.text_dictionary[parsed.text_codes[i]], _KINDS[int(parsed.kinds[i])],
             tuple("nan" if math.isnan(v) else float(v) for v in parsed.values[i]),
             int(parsed.positions[i]))
            for i in range(len(parsed.codes))]
    return (sorted(rows, key=repr),
            sorted((r.key, r.source, r.reason, r.message) for r in parsed.rejections))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(objects=_JSON_ROWS, blank=st.booleans())
def test_jsonl_block_rows_agree_with_parse_row(objects, blank):
    columns = Columns("id", "ts", ("v", "w"))
    lines = [json.dumps(o) for o in objects]
    if blank:
        lines.insert(len(lines) // 2, "")
    block = ("\n".join(lines) + "\n").encode()
    parsed = parsing.jsonl_block_rows(block, 1, columns, 0, "in.jsonl", strip_bom=True)
    assert _parsed_rows(parsed) == _reference_rows(lines, columns, "in.jsonl")


@pytest.mark.parametrize("stamp", [lambda i: i, lambda i: f"2024-01-02 {i:02d}:00:00",
                                   lambda i: f"2024-01-{i + 1:02d}"], ids=["int", "datetime",
                                                                          "date"])
def test_jsonl_block_rows_take_the_column_path_for_plain_objects(monkeypatch, stamp):
    # Typed columns (string ids, integer or date-like timestamps, float values): no line
    # is parsed on its own, and date-like strings keep their text.
    lines = [json.dumps({"id": f"s{i % 3}", "ts": stamp(i), "v": i * 0.5})
             for i in range(20)]
    calls = []
    for module in (parsing, parsed_rows):
        monkeypatch.setattr(module, "parse_row",
                            lambda *args: calls.append(args) or parse_row(*args))
    parsed = parsing.jsonl_block_rows(("\n".join(lines) + "\n").encode(), 1,
                                      Columns("id", "ts", ("v",)), 0, "in.jsonl",
                                      strip_bom=True)
    assert len(parsed.codes) == 20 and calls == []
    assert _parsed_rows(parsed) == _reference_rows(lines, Columns("id", "ts", ("v",)),
                                                   "in.jsonl")


_TYPED_COLUMN = st.one_of(
    st.lists(st.one_of(st.none(), st.integers(-2**62, 2**62)), min_size=30, max_size=30),
    st.lists(st.one_of(st.none(), st.floats(allow_nan=False, allow_infinity=False,
                                            min_value=-1e300, max_value=1e300)),
             min_size=30, max_size=30),
    st.lists(st.one_of(st.none(), st.sampled_from(
        ["", "nan", "x", " 3 ", "2024-01-02", "1e39", "17", "a", " b "])),
        min_size=30, max_size=30),
    st.lists(st.one_of(st.none(), st.booleans()), min_size=30, max_size=30),
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ids=_TYPED_COLUMN, stamps=_TYPED_COLUMN, values=_TYPED_COLUMN, count=st.integers(1, 30))
def test_jsonl_typed_columns_agree_with_parse_row(ids, stamps, values, count):
    # One type per column (as real files have): mostly the column-wise path.
    lines = [json.dumps({"id": ids[i], "ts": stamps[i], "v": values[i]})
             for i in range(count)]
    columns = Columns("id", "ts", ("v",))
    parsed = parsing.jsonl_block_rows(("\n".join(lines) + "\n").encode(), 1,
                                      columns, 0, "in.jsonl", strip_bom=True)
    assert _parsed_rows(parsed) == _reference_rows(lines, columns, "in.jsonl")


def _categories_by_position(parsed) -> dict[int, tuple[str, ...]]:
    """Each parsed row's categorical texts, by input position."""
    codes = parsed.values[:, -parsed.num_categoricals:].astype(np.int64)
    return {int(p): tuple(parsed.categories[c] for c in row)
            for p, row in zip(parsed.positions.tolist(), codes.tolist(), strict=True)}


_CATEGORY_VALUES = [None, "", " a ", "a", "NA", "nan", 7, 7.5, 7.0, True, "é", "x y"]


def test_categoricals_of_every_format_agree_with_parse_row(tmp_path):
    """The column-wise texts of categoricals (CSV plain and quoted lines, JSON Lines,
    typed Parquet) are those ``parse_row`` gives row by row."""
    columns = Columns("id", "ts", ("v",), ("cat", "other"))
    rng = np.random.default_rng(3)
    records = [{"id": "s", "ts": i, "v": 1.0,
                "cat": _CATEGORY_VALUES[int(rng.integers(len(_CATEGORY_VALUES)))],
                "other": _CATEGORY_VALUES[int(rng.integers(len(_CATEGORY_VALUES)))]}
               for i in range(200)]

    def expected(rows, source_of):
        return {position: parse_row(row, columns, source_of(position)).categories
                for position, row in rows}

    # JSON Lines: one block, typed columns where pyarrow stands for json.loads.
    lines = [json.dumps(r) for r in records]
    parsed = parsing.jsonl_block_rows(("\n".join(lines) + "\n").encode(), 1, columns, 0,
                                      "in.jsonl", strip_bom=False)
    assert _categories_by_position(parsed) == expected(
        [(n, json.loads(line)) for n, line in enumerate(lines, start=1)], str)
    # Parquet: string columns, then typed ones (each distinct value made text once).
    strings = [{**r, "cat": None if r["cat"] is None else str(r["cat"]),
                "other": None if r["other"] is None else str(r["other"])} for r in records]
    path = str(tmp_path / "strings.parquet")
    pq.write_table(pa.Table.from_pylist(strings), path)
    (task,) = plan_parquet_ranges([path], columns)
    assert _categories_by_position(parsing.parquet_group_rows(task, columns)) == {
        n: (category_text(r["cat"]), category_text(r["other"]))
        for n, r in enumerate(strings, start=1)}
    ints = pa.table({"id": ["s"] * 4, "ts": [1, 2, 3, 4], "v": [1.0] * 4,
                     "cat": pa.array([3, None, -1, 3], pa.int64()),
                     "other": pa.array([1.5, None, 2.0, 1.5], pa.float64())})
    pq.write_table(ints, path)
    (task,) = plan_parquet_ranges([path], columns)
    assert list(_categories_by_position(parsing.parquet_group_rows(task, columns)).values()
                ) == [("3", "1.5"), ("", ""), ("-1", "2.0"), ("3", "1.5")]
    # CSV: plain lines column-wise, quoted ones one by one.
    header = ("id", "ts", "v", "cat", "other")
    texts = ["s,1,1, a ,b", 's,2,1,"q, r",b', "s,3,1,,", "s,4,1,NA, é ", 's,5,1,"",x']
    parsed = parsing.csv_block_rows(("\n".join(texts) + "\n").encode(), 2, header, columns,
                                    0, "in.csv")
    assert _categories_by_position(parsed) == expected(
        [(n, text_rows.parse_csv_line(t, header)) for n, t in enumerate(texts, start=2)], str)
    assert _categories_by_position(parsed)[3] == ("q, r", "b")


_BLOCK = parsing.ARROW_BLOCK_BYTES  # pyarrow's 1 MiB


@pytest.mark.parametrize(("length", "block_size"), [
    (10, None), (_BLOCK, None), (_BLOCK + 1, 2 * _BLOCK), (3_000_000, 3 * _BLOCK)])
def test_arrow_block_size_is_the_default_or_fits_the_longest_line(length, block_size):
    block = b"a,1,2\n" + b"x" * length + b"\na,2,3\n"
    assert parsing.arrow_block_size(block, 2, "in.csv") == block_size


def test_arrow_block_size_refuses_a_line_over_the_limit_naming_it():
    block = b"a,1,2\n" + b"x" * 10 + b"\n" + b"x" * 11 + b"\n"
    assert parsing.arrow_block_size(block, 7, "in.csv", max_line_bytes=11) is None
    with pytest.raises(ValueError) as error:
        parsing.arrow_block_size(block, 7, "in.csv", max_line_bytes=10)
    assert str(error.value) == str(line_too_long("in.csv", 9, 10))


def test_csv_block_rows_read_a_line_longer_than_pyarrow_blocks_column_wise(monkeypatch):
    # pyarrow refuses a line spanning a whole block of 1 MiB; read in blocks that fit
    # it, the 3 MB value is rejected as a short bad value is, from the column path.
    long_value = "x" * 3_000_000
    lines = [f"s{i % 2},{i},{i * 0.5}" for i in range(20)]
    lines[7:7] = [f"s1,900,{long_value}", "s1,901,xyz"]
    block = ("\n".join(lines) + "\n").encode()
    header, columns = ("id", "ts", "v"), Columns("id", "ts", ("v",))
    assert parsing._read_plain_csv(block, 3, {"id": 0, "ts": 1, "v": 2}) is None
    calls = []
    for module in (parsing, parsed_rows):
        monkeypatch.setattr(module, "parse_row",
                            lambda *args: calls.append(args) or parse_row(*args))
    parsed = parsing.csv_block_rows(block, 2, header, columns, 0, "in.csv",
                                    parsing.arrow_block_size(block, 2, "in.csv"))
    assert len(parsed.codes) == 20 and len(calls) == 2  # the two bad values only
    message = f"Column 'v': could not convert string to float: {long_value!r}"
    assert [(r.key, r.source, r.reason, r.message) for r in parsed.rejections] == [
        ("s1@900", "in.csv:9", dead_letters.UNPARSABLE_VALUE,
         f"{message[:1000]}... ({len(message)} characters)"),
        ("s1@901", "in.csv:10", dead_letters.UNPARSABLE_VALUE,
         "Column 'v': could not convert string to float: 'xyz'")]


def test_jsonl_block_rows_read_a_line_longer_than_pyarrow_blocks_column_wise(monkeypatch):
    lines = [json.dumps({"id": f"s{i % 3}", "ts": i, "v": i * 0.5}) for i in range(20)]
    lines[5] = json.dumps({"id": "s" * 3_000_000, "ts": 5, "v": 2.5})  # a series of its own
    block = ("\n".join(lines) + "\n").encode()
    columns = Columns("id", "ts", ("v",))
    assert parsing._read_plain_jsonl(block, columns) is None
    calls = []
    for module in (parsing, parsed_rows):
        monkeypatch.setattr(module, "parse_row",
                            lambda *args: calls.append(args) or parse_row(*args))
    parsed = parsing.jsonl_block_rows(block, 1, columns, 0, "in.jsonl", strip_bom=True,
                                      block_size=parsing.arrow_block_size(block, 1,
                                                                          "in.jsonl"))
    assert len(parsed.codes) == 20 and calls == []
    assert _parsed_rows(parsed) == _reference_rows(lines, columns, "in.jsonl")


@pytest.mark.parametrize("suffix", ["csv", "jsonl"])
def test_parse_range_rows_stops_at_a_line_over_the_limit_naming_it(tmp_path, suffix):
    # The read step's own check (the driver's covers local files first): the range
    # where line 6 starts names it, whichever range it runs into.
    path = tmp_path / f"rows.{suffix}"
    lines = ["id,ts,v" if suffix == "csv" else '{"id": "a", "ts": 0, "v": 1}',
             *(['{"id": "a", "ts": 1, "v": 1}'] * 4 if suffix == "jsonl" else ["a,1,1"] * 4),
             "a,2," + "x" * 40, "a,3,1"]
    path.write_text("\n".join(lines) + "\n")
    tasks = plan_text_ranges([(str(path), path.stat().st_size)], range_bytes=16)
    before = first_line_numbers([count_line_breaks(task) for task in tasks])
    header = ("id", "ts", "v") if suffix == "csv" else ()
    failed = []
    for task in tasks:
        first_line = 1 + before[task.file_index, task.range_index]
        try:
            parsing.parse_range_rows(task, first_line, suffix, Columns("id", "ts", ("v",)),
                                     header, max_line_bytes=30)
        except ValueError as e:
            failed.append((task.range_index, str(e)))
    line_6_starts_at = sum(len(line) + 1 for line in lines[:5])
    assert failed == [(line_6_starts_at // 16, str(line_too_long(str(path), 6, 30)))]


def test_rows_builder_cuts_a_long_key_and_message():
    builder = parsed_rows.RowsBuilder(Columns("id", "ts", ("v",)))
    key, message = "k" * 1500, "m" * 999
    builder.add_result(0, Rejection(key, "in.csv:2", dead_letters.UNPARSABLE_VALUE, message))
    builder.add_result(1, Rejection("a@1", "in.csv:3", dead_letters.UNPARSABLE_VALUE, message))
    assert [(r.key, r.message) for r in builder.build().rejections] == [
        ("k" * 1000 + "... (1500 characters)", message), ("a@1", message)]
