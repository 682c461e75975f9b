"""Unit tests of etl/timeseries/read.py: files → validated columnar chunks.

The rows and dead letters the column-wise reader produces are checked against
expectations written out by hand and, on generated messy input, against
``parse_row`` (the one-row reference) applied line by line.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import tempfile

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from etl.core import dead_letters, text_rows
from etl.core.dead_letters import Rejection
from etl.timeseries import read
from etl.timeseries.chunks import (
    DATETIME_BIT,
    NUMERIC_BIT,
    POSITION_FILE_STRIDE,
    decode_chunk,
    encode_chunk,
)
from etl.timeseries.sources import Columns, Row, parse_row

# Never the plain DirectRunner: it first tries to download Prism, which stalls offline.
RUNNER = "apache_beam.runners.portability.fn_api_runner.FnApiRunner"
# 2024-01-02T00:00:00Z and 2024-01-02T03:04:05Z in seconds since the epoch.
DAY = 1704153600.0
MOMENT = DAY + 3 * 3600 + 4 * 60 + 5
_KINDS = {NUMERIC_BIT: "numeric", DATETIME_BIT: "datetime"}


def _rows_of(element, files, fmt):
    """A chunk's rows as (series, time, text, kind, values, source) tuples."""
    _, ref = element
    [chunk] = read.read_chunks([ref])
    texts = chunk.time_texts().strings()
    for series_id, kinds, rows in chunk.runs():
        for i in range(rows.start, rows.stop):
            file_index, number = divmod(int(chunk.positions[i]), POSITION_FILE_STRIDE)
            row = "row" if fmt == "parquet" else ""
            yield (series_id, float(chunk.times[i]), texts[i], _KINDS.get(kinds, "mixed"),
                   tuple("nan" if math.isnan(v) else float(v) for v in chunk.values[i]),
                   f"{files[file_index]}:{row}{number}")


def _read(pattern: str, columns: Columns, check_rows: list, check_rejections: list,
          range_bytes: int = read.RANGE_BYTES) -> None:
    plan = read.InputPlan.from_pattern(pattern, columns, range_bytes)
    spill_dir = tempfile.mkdtemp(prefix="chunks")
    with TestPipeline(runner=RUNNER) as p:
        outputs = p | read.ReadSeriesChunks(plan, columns, spill_dir)
        assert_that(outputs.chunks | beam.FlatMap(_rows_of, files=plan.files, fmt=plan.fmt),
                    equal_to(check_rows), label="CheckRows")
        assert_that(outputs[dead_letters.REJECTED]
                    | beam.Map(lambda r: (r.key, r.source, r.reason)),
                    equal_to(check_rejections), label="CheckRejected")
        assert_that(outputs[read.ROW_COUNTS] | beam.CombineGlobally(sum),
                    equal_to([len(check_rows)]), label="CheckRowCount")


def test_read_series_chunks_csv(tmp_path):
    path = tmp_path / "rows.csv"
    path.write_text(
        "\ufeffsensor,when,temp,note\n"            # 1
        "a,1,10,x\n"                               # 2
        "a,2,,y\n"                                 # 3: missing value → NaN
        "\n"                                       # 4: blank, skipped
        "b,2024-01-02,3.5,z\n"                     # 5
        ",3,1,w\n"                                 # 6: no series id
        "a,later,1,v\n"                            # 7: bad timestamp
        "a,4,abc,u\n"                              # 8: bad value
        "a,5,6,7,8\n"                              # 9: five fields for four columns
        '"c","6","-1.5","quoted, comma"\n',        # 10
        encoding="utf-8")
    p = str(path)
    _read(p, Columns("sensor", "when", ("temp",)),
          [("a", 1.0, "1", "numeric", (10.0,), f"{p}:2"),
           ("a", 2.0, "2", "numeric", ("nan",), f"{p}:3"),
           ("b", DAY, "2024-01-02", "datetime", (3.5,), f"{p}:5"),
           ("c", 6.0, "6", "numeric", (-1.5,), f"{p}:10")],
          [(f"{p}:6", f"{p}:6", "missing_series_id"),
           ("a@later", f"{p}:7", "unparsable_timestamp"),
           ("a@4", f"{p}:8", "unparsable_value"),
           (f"{p}:9", f"{p}:9", "malformed_row")])


def test_read_series_chunks_csv_glob_reads_every_file(tmp_path):
    (tmp_path / "a.csv").write_text("id,ts,v\na,1,2\n")
    (tmp_path / "b.csv").write_text("id,ts,v\nb,5,7\nb,6\n")
    _read(str(tmp_path / "*.csv"), Columns("id", "ts", ("v",)),
          [("a", 1.0, "1", "numeric", (2.0,), f"{tmp_path}/a.csv:2"),
           ("b", 5.0, "5", "numeric", (7.0,), f"{tmp_path}/b.csv:2")],
          [(f"{tmp_path}/b.csv:3", f"{tmp_path}/b.csv:3", "malformed_row")])


def test_read_series_chunks_csv_files_with_different_column_order(tmp_path):
    # Every file passes check_columns, so each must be parsed with its own header.
    (tmp_path / "a.csv").write_text("id,ts,v\na,1,2\n")
    (tmp_path / "b.csv").write_text("ts,id,v\n5,b,7\n")
    _read(str(tmp_path / "*.csv"), Columns("id", "ts", ("v",)),
          [("a", 1.0, "1", "numeric", (2.0,), f"{tmp_path}/a.csv:2"),
           ("b", 5.0, "5", "numeric", (7.0,), f"{tmp_path}/b.csv:2")],
          [])


def test_read_series_chunks_csv_missing_column_is_value_error(tmp_path):
    (tmp_path / "rows.csv").write_text("id,ts\na,1\n")
    with pytest.raises(ValueError, match=r"lacks column\(s\) \['v'\]"):
        read.InputPlan.from_pattern(str(tmp_path / "rows.csv"),
                                               Columns("id", "ts", ("v",)))


def test_read_series_chunks_parquet(tmp_path):
    path = str(tmp_path / "rows.parquet")
    pq.write_table(pa.table({
        "id": ["a", "a", None, "b", "b", "c"],
        "ts": [1, 2, 3, 4, 5, 6],
        "u": [1.0, None, 1.0, 2.0, math.inf, 3.0],
        "v": [10.0, 20.0, 30.0, 40.0, 50.0, 60.0],
    }), path)
    _read(path, Columns("id", "ts", ("v", "u")),
          [("a", 1.0, "1", "numeric", (10.0, 1.0), f"{path}:row1"),
           ("a", 2.0, "2", "numeric", (20.0, "nan"), f"{path}:row2"),
           ("b", 4.0, "4", "numeric", (40.0, 2.0), f"{path}:row4"),
           ("c", 6.0, "6", "numeric", (60.0, 3.0), f"{path}:row6")],
          [(f"{path}:row3", f"{path}:row3", "missing_series_id"),
           ("b@5", f"{path}:row5", "unparsable_value")])


def test_read_series_chunks_parquet_timestamp_column_is_datetime(tmp_path):
    path = str(tmp_path / "rows.parquet")
    pq.write_table(pa.table({
        "id": ["a", "a"],
        "ts": pa.array([dt.datetime(2024, 1, 2), dt.datetime(2024, 1, 2, 3, 4, 5)],
                       pa.timestamp("s")),
        "v": [1.0, 2.0],
    }), path)
    _read(path, Columns("id", "ts", ("v",)),
          [("a", DAY, "2024-01-02T00:00:00", "datetime", (1.0,), f"{path}:row1"),
           ("a", MOMENT, "2024-01-02T03:04:05", "datetime", (2.0,), f"{path}:row2")],
          [])


def test_read_series_chunks_parquet_missing_column_is_value_error(tmp_path):
    path = str(tmp_path / "rows.parquet")
    pq.write_table(pa.table({"id": ["a"], "ts": [1]}), path)
    with pytest.raises(ValueError, match=r"lacks column\(s\) \['v'\]"):
        read.InputPlan.from_pattern(path, Columns("id", "ts", ("v",)))


def test_read_series_chunks_parquet_row_groups_number_rows_across_the_file(tmp_path):
    path = str(tmp_path / "rows.parquet")
    pq.write_table(pa.table({"id": ["a"] * 5, "ts": [1, 2, 3, 4, 5],
                             "v": [1.0, 2.0, math.inf, 4.0, 5.0]}), path, row_group_size=2)
    _read(path, Columns("id", "ts", ("v",)),
          [("a", float(t), str(t), "numeric", (float(t),), f"{path}:row{t}")
           for t in (1, 2, 4, 5)],
          [("a@3", f"{path}:row3", "unparsable_value")])


def _numbered_csv(tmp_path, lines: list[str], header: str = "id,ts,v") -> str:
    path = tmp_path / "rows.csv"
    path.write_text(header + "\n" + "".join(line + "\n" for line in lines))
    return str(path)


@pytest.mark.parametrize("range_bytes", [7, 23, 64, 1 << 20])
def test_read_series_chunks_any_range_size_reads_every_line_once(tmp_path, range_bytes):
    lines = [f"s{i % 3},{i},{i * 0.5}" for i in range(40)]
    lines[10] = "s1,bad,1"
    lines[25] = ""
    path = _numbered_csv(tmp_path, lines)
    rows = [(f"s{i % 3}", float(i), str(i), "numeric", (i * 0.5,), f"{path}:{i + 2}")
            for i in range(40) if i not in (10, 25)]
    _read(path, Columns("id", "ts", ("v",)), rows,
          [("s1@bad", f"{path}:12", "unparsable_timestamp")], range_bytes=range_bytes)


def test_read_series_chunks_header_only_file_has_no_rows(tmp_path):
    _read(_numbered_csv(tmp_path, []), Columns("id", "ts", ("v",)), [], [])


def test_read_series_chunks_carriage_return_inside_a_line_is_malformed(tmp_path):
    path = tmp_path / "rows.csv"
    path.write_bytes(b"id,ts,v\r\na,1,2\r\na,2\r,3\r\n")
    _read(str(path), Columns("id", "ts", ("v",)),
          [("a", 1.0, "1", "numeric", (2.0,), f"{path}:2")],
          [(f"{path}:3", f"{path}:3", "malformed_row")])


def test_read_series_chunks_line_not_utf8_is_malformed(tmp_path):
    path = tmp_path / "rows.csv"
    path.write_bytes(b"id,ts,v\na,1,2\n\xff\xfe,2,3\n")
    _read(str(path), Columns("id", "ts", ("v",)),
          [("a", 1.0, "1", "numeric", (2.0,), f"{path}:2")],
          [(f"{path}:3", f"{path}:3", "malformed_row")])


def test_read_series_chunks_jsonl(tmp_path):
    path = tmp_path / "rows.jsonl"
    path.write_text("\ufeff" + "\n".join([
        json.dumps({"id": "a", "ts": "2024-01-02", "v": 1.5}),
        "",
        "[1, 2]",
        json.dumps({"id": "a", "ts": 5, "v": "x"}),
        json.dumps({"id": "b", "ts": 7, "v": None}),
        json.dumps({"id": "b", "ts": 8, "v": 1e39}),
    ]) + "\n", encoding="utf-8")
    p = str(path)
    _read(p, Columns("id", "ts", ("v",)),
          [("a", DAY, "2024-01-02", "datetime", (1.5,), f"{p}:1"),
           ("b", 7.0, "7", "numeric", ("nan",), f"{p}:5")],
          [(f"{p}:3", f"{p}:3", "malformed_row"), ("a@5", f"{p}:4", "unparsable_value"),
           ("b@8", f"{p}:6", "value_out_of_range")])


def test_to_chunks_puts_each_series_in_its_bucket_once():
    lines = [f"s{i % 7},{i},1" for i in range(70)]
    parsed = read.csv_block_rows(
        "\n".join(lines).encode(), 2, ("id", "ts", "v"), Columns("id", "ts", ("v",)), 0,
        "x.csv")
    seen: dict[str, int] = {}
    for bucket, chunk in read.to_chunks(parsed, 3):
        for series_id, _, rows in chunk.runs():
            assert series_id not in seen
            seen[series_id] = bucket
            assert bucket == read.bucket_of(series_id, 3)
            assert rows.stop - rows.start == 10
    assert sorted(seen) == [f"s{i}" for i in range(7)]


@pytest.mark.parametrize(("texts", "style"), [
    (["2024-01-02 00:00:00", "2024-01-02 01:00:00"], "iso_space"),
    (["2024-01-02T01:00:00Z"], "iso_z"),
    (["2024-01-02", "2024-01-03"], "date"),
    (["17", "-3"], "int"),
    (["17.0", "18"], None),
    (["2024-01-02T01:00:00", "2024-01-02 02:00:00"], None),
])
def test_to_chunks_drops_texts_only_when_a_format_rewrites_them(texts, style):
    block = "".join(f"s,{t},1\n" for t in texts).encode()
    parsed = read.csv_block_rows(block, 2, ("id", "ts", "v"),
                                            Columns("id", "ts", ("v",)), 0, "x.csv")
    [(_, chunk)] = list(read.to_chunks(parsed, 1))
    assert chunk.text_style == style
    assert (chunk.texts is None) == (style is not None)
    assert chunk.time_texts().strings() == texts


# --- the column-wise path decides rows exactly as parse_row does ----------------------

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
    columns = Columns("id", "ts", ("a", "b"))
    header = ("id", "ts", "a", "b")
    lines = [",".join(f.replace(",", ";").replace('"', "'") for f in row) for row in rows]
    block = ("\n".join(lines) + "\n").encode()
    parsed = read.csv_block_rows(block, 2, header, columns, 0, "in.csv")
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
                                  result.source))
        else:
            expected_rejections.append((result.key, result.source, result.reason,
                                        result.message))
    got_rows = []
    for i in range(len(parsed.codes)):
        got_rows.append((
            parsed.series_ids[parsed.codes[i]], float(parsed.times[i]),
            parsed.text_dictionary[parsed.text_codes[i]],
            _KINDS[int(parsed.kinds[i])],
            tuple("nan" if math.isnan(v) else float(v) for v in parsed.values[i]),
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
        plan = read.InputPlan.from_pattern(path, columns)
        got_rows, got_rejections = [], []
        for task in plan.ranges:
            parsed = read.parquet_group_rows(task, columns)
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


def test_encoded_chunks_decode_to_the_same_rows():
    block = "".join(f"s{i % 3},{t},{i * 0.25}\n" for i, t in enumerate(
        ["5", "2024-01-02", "7", "x"] * 5)).encode()
    parsed = read.csv_block_rows(block, 2, ("id", "ts", "v"),
                                            Columns("id", "ts", ("v",)), 3, "x.csv")
    for _, chunk in read.to_chunks(parsed, 2):
        back = decode_chunk(encode_chunk(chunk))
        assert back.series_ids == chunk.series_ids
        assert back.text_style == chunk.text_style
        for name in ("run_lengths", "run_kinds", "times", "values", "positions"):
            np.testing.assert_array_equal(getattr(back, name), getattr(chunk, name))
        assert back.time_texts().strings() == chunk.time_texts().strings()


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
    parsed = read.jsonl_block_rows(block, 1, columns, 0, "in.jsonl",
                                              strip_bom=True)
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
    monkeypatch.setattr(read, "parse_row",
                        lambda *args: calls.append(args) or parse_row(*args))
    parsed = read.jsonl_block_rows(("\n".join(lines) + "\n").encode(), 1,
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
    parsed = read.jsonl_block_rows(("\n".join(lines) + "\n").encode(), 1,
                                              columns, 0, "in.jsonl", strip_bom=True)
    assert _parsed_rows(parsed) == _reference_rows(lines, columns, "in.jsonl")
