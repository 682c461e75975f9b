"""Unit tests of etl/timeseries/rows/first_chunk.py: a file whose first rows are all rejected
for one reason stops the job before it runs, saying why and what to pass."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from etl.timeseries.rows import first_chunk
from etl.timeseries.rows.read import InputPlan
from etl.timeseries.rows.sources import Columns

COLUMNS = Columns(series_id="series_id", timestamp="date", values=("value",))


def _csv(path, dates, values=None) -> str:
    values = values or [str(i) for i in range(len(dates))]
    path.write_text("series_id,date,value\n" + "".join(
        f"a,{d},{v}\n" for d, v in zip(dates, values, strict=True)))
    return str(path)


def _check(path: str, columns: Columns = COLUMNS) -> None:
    first_chunk.check_first_chunks(InputPlan.from_pattern(path, columns), columns)


def test_check_first_chunks_us_dates_name_the_format_that_reads_them(tmp_path):
    path = _csv(tmp_path / "us.csv", ["01/01/1959", "02/01/1959", "03/01/1959"])
    with pytest.raises(ValueError) as error:
        _check(path)
    assert str(error.value) == (
        f"timestamps like '01/01/1959' are not ISO 8601 (nor numbers); pass "
        f"--timestamp_format=%m/%d/%Y (the first 3 row(s) of {path!r} were all rejected "
        f"as unparsable_timestamp; nothing was run or written).")


def test_check_first_chunks_day_first_dates_get_the_day_first_format(tmp_path):
    # 13/01 has no month 13: only the day-first format reads every example.
    path = _csv(tmp_path / "eu.csv", ["12/01/1959", "13/01/1959", "14/01/1959"])
    with pytest.raises(ValueError, match=r"^timestamps like '12/01/1959' are not ISO "
                                         r"8601 \(nor numbers\); pass "
                                         r"--timestamp_format=%d/%m/%Y \("):
        _check(path)


def test_check_first_chunks_suggests_no_format_that_does_not_read_the_example(tmp_path):
    path = _csv(tmp_path / "q.csv", ["1959 Q1", "1959 Q2"])
    with pytest.raises(ValueError) as error:
        _check(path)
    assert str(error.value).startswith(
        "timestamps like '1959 Q1' are not ISO 8601 (nor numbers); pass "
        "--timestamp_format with the strptime format they are written in")
    assert "--timestamp_format=" not in str(error.value)


def test_check_first_chunks_iso_dates_with_a_format_say_to_leave_it_out(tmp_path):
    path = _csv(tmp_path / "iso.csv", ["1959-01-01", "1959-02-01"])
    columns = Columns("series_id", "date", ("value",), timestamp_format="%m/%d/%Y")
    with pytest.raises(ValueError, match=r"^timestamps like '1959-01-01' do not match "
                                         r"--timestamp_format=%m/%d/%Y; they are ISO "
                                         r"8601 or numbers: leave --timestamp_format out"):
        _check(path, columns)


def test_check_first_chunks_a_wrong_format_gets_the_right_one(tmp_path):
    path = _csv(tmp_path / "us.csv", ["01/31/1959", "02/28/1959"])
    columns = Columns("series_id", "date", ("value",), timestamp_format="%d/%m/%Y")
    with pytest.raises(ValueError, match=r"^timestamps like '01/31/1959' do not match "
                                         r"--timestamp_format=%d/%m/%Y; pass "
                                         r"--timestamp_format=%m/%d/%Y \("):
        _check(path, columns)


def test_check_first_chunks_passes_us_dates_with_their_format(tmp_path):
    path = _csv(tmp_path / "us.csv", ["01/01/1959", "02/01/1959"])
    _check(path, Columns("series_id", "date", ("value",), timestamp_format="%m/%d/%Y"))


def test_check_first_chunks_passes_a_file_with_some_good_rows(tmp_path):
    _check(_csv(tmp_path / "some.csv", ["01/01/1959", "1959-02-01", "03/01/1959"]))


def test_check_first_chunks_passes_rows_rejected_for_several_reasons(tmp_path):
    _check(_csv(tmp_path / "mixed.csv", ["01/01/1959", "1959-02-01"], ["1", "abc"]))


def test_check_first_chunks_passes_a_header_only_file(tmp_path):
    path = tmp_path / "empty.csv"
    path.write_text("series_id,date,value\n")
    _check(str(path))


def test_check_first_chunks_text_values_name_the_column(tmp_path):
    path = _csv(tmp_path / "text.csv", ["1959-01-01", "1959-02-01"], ["low", "high"])
    with pytest.raises(ValueError, match=r"^column 'value' holds values like 'low', not "
                                         r"numbers; name numeric columns in "
                                         r"--value_columns .* rejected as "
                                         r"unparsable_value;"):
        _check(path)


def test_check_first_chunks_jsonl_without_the_timestamp_field_names_the_flag(tmp_path):
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps({"series_id": "a", "day": f"1959-01-0{i}",
                                        "value": i}) + "\n" for i in range(1, 4)))
    with pytest.raises(ValueError) as error:
        _check(str(path))
    assert str(error.value) == (
        f"no row has a 'date' column; the rows' columns are ['series_id', 'day', 'value']: "
        f"pass --timestamp_column=day (the closest column no other flag names) (the first "
        f"3 row(s) of {str(path)!r} were all rejected as unparsable_timestamp; nothing "
        f"was run or written).")


def test_check_first_chunks_empty_series_ids_name_the_flag(tmp_path):
    path = tmp_path / "ids.csv"
    path.write_text("series_id,date,value\n,1959-01-01,1\n,1959-02-01,2\n")
    with pytest.raises(ValueError, match=r"^no row has a 'series_id' value; pass "
                                         r"--series_id_column naming the column of series "
                                         r"ids \(the first 2 row\(s\) .* as "
                                         r"missing_series_id;"):
        _check(str(path))


def test_check_first_chunks_reads_parquet(tmp_path):
    path = str(tmp_path / "us.parquet")
    pq.write_table(pa.table({"series_id": ["a", "a"], "date": ["01/31/1959", "02/28/1959"],
                             "value": [1.0, 2.0]}), path)
    with pytest.raises(ValueError, match=r"^timestamps like '01/31/1959' .* pass "
                                         r"--timestamp_format=%m/%d/%Y \(the first 2 "):
        _check(path)


def test_check_first_chunks_reads_only_the_first_chunk(tmp_path):
    # Bad rows past the first chunk are the read step's dead letters, not a stop.
    rows = 2 * first_chunk.FIRST_CHUNK_BYTES // len("a,1959-01-01,0\n")
    good = [f"{1959 + i // 365:04d}-01-01" for i in range(rows)]
    _check(_csv(tmp_path / "late.csv", good + ["01/01/2100"] * 10))


def test_check_first_chunks_leaves_a_line_longer_than_the_chunk_to_the_read_step(tmp_path):
    path = _csv(tmp_path / "long.csv", ["01/01/1959", "02/01/1959"],
                ["x" * first_chunk.FIRST_CHUNK_BYTES, "1"])
    chunk = first_chunk.read_first_chunk(InputPlan.from_pattern(path, COLUMNS), 0, COLUMNS)
    assert (chunk.rows_parsed, chunk.rejections, chunk.sample) == (0, (), ())
    _check(path)


@pytest.mark.parametrize(("texts", "expected"), [
    (["01/31/1959"], "%m/%d/%Y"),
    (["31/01/1959"], "%d/%m/%Y"),
    (["31.01.1959 13:45"], "%d.%m.%Y %H:%M"),
    (["Jan 31, 1959"], "%b %d, %Y"),
    (["1959-01"], "%Y-%m"),
    (["1959 Q1"], None),
    ([], None),
])
def test_suggest_timestamp_format(texts, expected):
    assert first_chunk.suggest_timestamp_format(texts) == expected
