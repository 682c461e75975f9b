"""Unit tests of etl/timeseries/rows/read.py: the read step, files → spilled chunks.

A few literal files go through ``ReadSeriesChunks`` in a ``TestPipeline``; the
chunks' rows, the rejections and the row counts are checked against expectations
written out by hand.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import tempfile

import apache_beam as beam
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to

from etl.core import dead_letters
from etl.timeseries.rows import read
from etl.timeseries.rows.chunks import read_chunks
from etl.timeseries.rows.ranges import POSITION_FILE_STRIDE, RANGE_BYTES
from etl.timeseries.rows.sources import Columns
from etl.timeseries.rows.time_texts import DATETIME_BIT, NUMERIC_BIT

# Never the plain DirectRunner: it first tries to download Prism, which stalls offline.
RUNNER = "apache_beam.runners.portability.fn_api_runner.FnApiRunner"
# 2024-01-02T00:00:00Z and 2024-01-02T03:04:05Z in seconds since the epoch.
DAY = 1704153600.0
MOMENT = DAY + 3 * 3600 + 4 * 60 + 5
_KINDS = {NUMERIC_BIT: "numeric", DATETIME_BIT: "datetime"}


def _rows_of(element, files, fmt):
    """A chunk's rows as (series, time, text, kind, values, source) tuples."""
    _, ref = element
    [chunk] = read_chunks([ref])
    texts = chunk.time_texts().strings()
    for series_id, kinds, rows in chunk.slices():
        for i in range(rows.start, rows.stop):
            file_index, number = divmod(int(chunk.positions[i]), POSITION_FILE_STRIDE)
            row = "row" if fmt == "parquet" else ""
            yield (series_id, float(chunk.times[i]), texts[i], _KINDS.get(kinds, "mixed"),
                   tuple("nan" if math.isnan(v) else float(v) for v in chunk.values[i]),
                   f"{files[file_index]}:{row}{number}")


def _read(pattern: str, columns: Columns, check_rows: list, check_rejections: list,
          range_bytes: int = RANGE_BYTES) -> None:
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
        read.InputPlan.from_pattern(str(tmp_path / "rows.csv"), Columns("id", "ts", ("v",)))


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


@pytest.mark.parametrize("data", [
    b"id,ts,v\r\na,1,2\r\na,2\r,3\r\n",     # a carriage return inside line 3
    b"id,ts,v\na,1,2\n\xff\xfe,2,3\n",        # line 3 is not UTF-8
], ids=["carriage_return", "not_utf8"])
def test_read_series_chunks_unreadable_line_is_malformed(tmp_path, data):
    path = tmp_path / "rows.csv"
    path.write_bytes(data)
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
