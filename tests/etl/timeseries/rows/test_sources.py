"""Unit tests of etl/timeseries/rows/sources.py: timestamps, values, rows, files and labels."""

from __future__ import annotations

import datetime as dt
import json
import math

import pytest

from etl.core.dead_letters import Rejection
from etl.timeseries.rows import sources
from etl.timeseries.rows.sources import Columns, Row

# Never the plain DirectRunner: it first tries to download Prism, which stalls offline.
RUNNER = "apache_beam.runners.portability.fn_api_runner.FnApiRunner"
SOURCE = "/data/rows.csv:3"
COLUMNS = Columns(series_id="id", timestamp="ts", values=("a", "b"))
# 2024-01-02T00:00:00Z and 2024-01-02T03:04:05Z in seconds since the epoch.
DAY = 1704153600.0
MOMENT = DAY + 3 * 3600 + 4 * 60 + 5


# --- parse_timestamp ------------------------------------------------------------------

@pytest.mark.parametrize(("value", "expected"), [
    (0, (0.0, "0", "numeric")),
    (17, (17.0, "17", "numeric")),
    (-3, (-3.0, "-3", "numeric")),
    (1.5, (1.5, "1.5", "numeric")),
    (-0.25, (-0.25, "-0.25", "numeric")),
])
def test_parse_timestamp_numbers(value, expected):
    assert sources.parse_timestamp(value) == expected


@pytest.mark.parametrize(("value", "expected"), [
    ("42", (42.0, "42", "numeric")),
    (" 42 ", (42.0, "42", "numeric")),
    ("-2.5", (-2.5, "-2.5", "numeric")),
    ("1e3", (1000.0, "1e3", "numeric")),
    ("20240102", (20240102.0, "20240102", "numeric")),
])
def test_parse_timestamp_numeric_strings(value, expected):
    assert sources.parse_timestamp(value) == expected


@pytest.mark.parametrize("text", ["2024-01-02", " 2024-01-02 "])
def test_parse_timestamp_iso_date_is_utc_midnight(text):
    assert sources.parse_timestamp(text) == (DAY, "2024-01-02", "datetime")


@pytest.mark.parametrize(("text", "expected_time"), [
    ("2024-01-02T03:04:05", MOMENT),             # naive = UTC
    ("2024-01-02 03:04:05", MOMENT),             # space separator
    ("2024-01-02T03:04:05Z", MOMENT),
    ("2024-01-02T03:04:05+00:00", MOMENT),
    ("2024-01-02T03:04:05+02:00", MOMENT - 7200),
    ("2024-01-02T03:04:05-05:30", MOMENT + 5.5 * 3600),
    ("2024-01-02T03:04:05.250Z", MOMENT + 0.25),
    ("1969-12-31T23:59:59Z", -1.0),
])
def test_parse_timestamp_iso_datetimes(text, expected_time):
    assert sources.parse_timestamp(text) == (expected_time, text, "datetime")


def test_parse_timestamp_naive_datetime_object_is_utc():
    value = dt.datetime(2024, 1, 2, 3, 4, 5)
    assert sources.parse_timestamp(value) == (
        MOMENT, "2024-01-02T03:04:05", "datetime")


def test_parse_timestamp_aware_datetime_object_keeps_its_offset():
    value = dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=dt.timezone(dt.timedelta(hours=2)))
    assert sources.parse_timestamp(value) == (
        MOMENT - 7200, "2024-01-02T03:04:05+02:00", "datetime")


def test_parse_timestamp_date_object_is_utc_midnight():
    assert sources.parse_timestamp(dt.date(2024, 1, 2)) == (
        DAY, "2024-01-02", "datetime")


@pytest.mark.parametrize("value", [
    True, False, None, math.inf, -math.inf, math.nan, "inf", "-inf", "nan", "", "   ",
    "abc", "yesterday", "2024-13-01", "2024-01-02T25:00:00", "2024-01-02T03:04:05+25:00",
])
def test_parse_timestamp_rejects_non_timestamps(value):
    with pytest.raises(ValueError):
        sources.parse_timestamp(value)


def test_parse_timestamp_integer_too_large_for_float_is_value_error():
    # A JSON Lines timestamp such as 1000...0 (400 digits) is a Python int that float()
    # cannot hold: it must be a ValueError (→ unparsable_timestamp), not OverflowError.
    with pytest.raises(ValueError):
        sources.parse_timestamp(10**400)


@pytest.mark.parametrize(("text", "fmt", "expected_time"), [
    ("01/02/2024", "%m/%d/%Y", DAY),
    (" 02.01.2024 ", "%d.%m.%Y", DAY),
    ("01/02/2024 03:04:05", "%m/%d/%Y %H:%M:%S", MOMENT),       # naive = UTC
    ("01/02/2024 05:04:05 +0200", "%m/%d/%Y %H:%M:%S %z", MOMENT),
])
def test_parse_timestamp_with_format_reads_the_text_as_written(text, fmt, expected_time):
    assert sources.parse_timestamp(text, fmt) == (expected_time, text.strip(), "datetime")


def test_parse_timestamp_with_format_reads_a_json_number_as_its_text():
    assert sources.parse_timestamp(20240102, "%Y%m%d") == (DAY, "20240102", "datetime")


def test_parse_timestamp_with_format_keeps_date_objects():
    assert sources.parse_timestamp(dt.date(2024, 1, 2), "%m/%d/%Y") == (
        DAY, "2024-01-02", "datetime")


@pytest.mark.parametrize("value", ["2024-01-02", "13/02/2024", "", 1.5])
def test_parse_timestamp_with_format_rejects_other_texts_naming_the_flag(value):
    with pytest.raises(ValueError, match=r"does not match --timestamp_format=%m/%d/%Y"):
        sources.parse_timestamp(value, "%m/%d/%Y")


def test_parse_row_uses_the_columns_timestamp_format():
    columns = Columns(series_id="id", timestamp="ts", values=("a", "b"),
                      timestamp_format="%m/%d/%Y")
    assert sources.parse_row({"id": "s1", "ts": "01/02/2024", "a": "1.5", "b": "2"},
                             columns, SOURCE) == Row(
        series_id="s1", time=DAY, time_text="01/02/2024", time_kind="datetime",
        values=(1.5, 2.0), source=SOURCE)
    rejected = sources.parse_row({"id": "s1", "ts": "2024-01-02", "a": "1", "b": "2"},
                                 columns, SOURCE)
    assert isinstance(rejected, Rejection)
    assert (rejected.key, rejected.reason, rejected.message) == (
        "s1@2024-01-02", "unparsable_timestamp",
        "Column 'ts': does not match --timestamp_format=%m/%d/%Y: '2024-01-02'")


# --- parse_value ----------------------------------------------------------------------

@pytest.mark.parametrize("value", [
    None, "", "   ", "nan", "NaN", "NAN", "null", "NULL", "None", "NA", " NA ", "N/A",
    math.nan,
])
def test_parse_value_missing_is_nan(value):
    assert math.isnan(sources.parse_value(value))


@pytest.mark.parametrize(("value", "expected"), [
    (0, 0.0), (3, 3.0), (-2.5, -2.5), (1e300, 1e300),
    ("4", 4.0), (" 1.5 ", 1.5), ("-1e-3", -0.001), ("0", 0.0),
])
def test_parse_value_numbers_and_numeric_strings(value, expected):
    result = sources.parse_value(value)
    assert type(result) is float
    assert result == expected


@pytest.mark.parametrize("value", ["abc", "1,5", "1.2.3", "twelve", "n/a?"])
def test_parse_value_rejects_text(value):
    with pytest.raises(ValueError):
        sources.parse_value(value)


@pytest.mark.parametrize("value", [math.inf, -math.inf, "inf", "-inf", "Infinity", "1e999"])
def test_parse_value_rejects_infinity(value):
    with pytest.raises(ValueError, match="not a finite number"):
        sources.parse_value(value)


@pytest.mark.parametrize("value", [True, False])
def test_parse_value_rejects_booleans(value):
    with pytest.raises(ValueError, match="boolean"):
        sources.parse_value(value)


def test_parse_value_integer_too_large_for_float_is_value_error():
    # JSON Lines value 1000...0 (400 digits): not a finite float, so it must be a
    # ValueError (→ unparsable_value), not an OverflowError.
    with pytest.raises(ValueError):
        sources.parse_value(10**400)


# --- parse_row ------------------------------------------------------------------------

def test_parse_row_valid_row():
    row = {"id": " s1 ", "ts": "2024-01-02", "a": "1.5", "b": 2}
    assert sources.parse_row(row, COLUMNS, SOURCE) == Row(
        series_id="s1", time=DAY, time_text="2024-01-02", time_kind="datetime",
        values=(1.5, 2.0), source=SOURCE)


@pytest.mark.parametrize("series", [None, "", "   "])
def test_parse_row_missing_series_id(series):
    row = {"ts": "1", "a": "1", "b": "2"}
    if series is not None:
        row["id"] = series
    result = sources.parse_row(row, COLUMNS, SOURCE)
    assert isinstance(result, Rejection)
    assert (result.key, result.source, result.reason) == (
        SOURCE, SOURCE, "missing_series_id")
    assert "'id'" in result.message


def test_parse_row_numeric_series_id_becomes_text():
    result = sources.parse_row({"id": 7, "ts": 1, "a": 1, "b": 2}, COLUMNS,
                                          SOURCE)
    assert isinstance(result, Row)
    assert result.series_id == "7"


@pytest.mark.parametrize("timestamp", ["soon", "", None, "inf", True])
def test_parse_row_unparsable_timestamp(timestamp):
    row = {"id": "s1", "ts": timestamp, "a": "1", "b": "2"}
    result = sources.parse_row(row, COLUMNS, SOURCE)
    assert isinstance(result, Rejection)
    assert (result.key, result.source, result.reason) == (
        f"s1@{timestamp}", SOURCE, "unparsable_timestamp")
    assert result.message.startswith("Column 'ts': ")


@pytest.mark.parametrize(("a", "b", "column"), [
    ("abc", "2", "a"), ("1", "abc", "b"), ("inf", "2", "a"), ("1", True, "b"),
])
def test_parse_row_unparsable_value_names_the_column(a, b, column):
    row = {"id": "s1", "ts": "5", "a": a, "b": b}
    result = sources.parse_row(row, COLUMNS, SOURCE)
    assert isinstance(result, Rejection)
    assert (result.key, result.source, result.reason) == ("s1@5", SOURCE, "unparsable_value")
    assert result.message.startswith(f"Column {column!r}: ")


def test_parse_row_huge_integer_value_is_unparsable_value():
    # parse_row catches ValueError only: an OverflowError here would fail the whole job.
    row = {"id": "s1", "ts": 5, "a": 10**400, "b": 2}
    result = sources.parse_row(row, COLUMNS, SOURCE)
    assert isinstance(result, Rejection)
    assert result.reason == "unparsable_value"


def test_parse_row_absent_value_column_is_nan():
    result = sources.parse_row({"id": "s1", "ts": "5", "a": "1"}, COLUMNS,
                                          SOURCE)
    assert isinstance(result, Row)
    assert result.values[0] == 1.0
    assert math.isnan(result.values[1])


def test_parse_row_missing_value_text_is_nan():
    result = sources.parse_row({"id": "s1", "ts": "5", "a": "", "b": "NA"},
                                          COLUMNS, SOURCE)
    assert isinstance(result, Row)
    assert len(result.values) == 2
    assert all(math.isnan(v) for v in result.values)


def test_parse_row_value_order_follows_columns():
    columns = Columns(series_id="id", timestamp="ts", values=("z", "x", "y"))
    row = {"x": "1", "y": "2", "z": "3", "id": "s", "ts": "0", "extra": "9"}
    result = sources.parse_row(row, columns, SOURCE)
    assert isinstance(result, Row)
    assert result.values == (3.0, 1.0, 2.0)


# --- input_format ---------------------------------------------------------------------

@pytest.mark.parametrize(("path", "expected"), [
    ("/in/rows.csv", "csv"),
    ("/in/ROWS.CSV", "csv"),
    ("/in/part-*.csv", "csv"),
    ("gs://bucket/rows.jsonl", "jsonl"),
    ("/in/rows.json", "jsonl"),
    ("/in/rows.parquet", "parquet"),
    ("/in/*.Parquet", "parquet"),
])
def test_input_format_from_extension(path, expected):
    assert sources.input_format(path) == expected


@pytest.mark.parametrize("path", [
    "/in/rows.txt", "/in/rows.csv.gz", "/in/rows", "/in/rows.tsv", "/in/csv",
])
def test_input_format_rejects_other_extensions(path):
    with pytest.raises(ValueError, match=r"must end in \.csv, \.jsonl or \.parquet"):
        sources.input_format(path)


# --- matched_files --------------------------------------------------------------------

def test_matched_files_glob_is_sorted(tmp_path):
    for name in ("b.csv", "a.csv", "c.csv", "notes.txt"):
        (tmp_path / name).write_text("x\n")
    assert [info.path for info in sources.matched_files(str(tmp_path / "*.csv"))] == [
        str(tmp_path / "a.csv"), str(tmp_path / "b.csv"), str(tmp_path / "c.csv")]


def test_matched_files_single_path(tmp_path):
    (tmp_path / "rows.csv").write_text("x\n")
    [info] = sources.matched_files(str(tmp_path / "rows.csv"))
    assert (info.path, info.size) == (str(tmp_path / "rows.csv"), 2)


@pytest.mark.parametrize("name", ["*.jsonl", "absent.csv"])
def test_matched_files_no_match_is_value_error(tmp_path, name):
    (tmp_path / "rows.csv").write_text("x\n")
    with pytest.raises(ValueError, match="matches no file"):
        sources.matched_files(str(tmp_path / name))


# --- check_columns --------------------------------------------------------------------

def test_check_columns_accepts_complete_header_in_any_order():
    # check_columns returns None or raises; a complete header must not raise.
    assert sources.check_columns(("b", "extra", "a", "ts", "id"), COLUMNS, "/in/x.csv") is None


def test_check_columns_names_the_missing_columns():
    with pytest.raises(ValueError) as info:
        sources.check_columns(("id", "a", "other"), COLUMNS, "/in/x.csv")
    message = str(info.value)
    assert "'/in/x.csv'" in message
    assert "['ts', 'b']" in message
    assert "['id', 'a', 'other']" in message


def test_check_columns_says_which_flags_to_pass_for_the_default_columns():
    columns = Columns(series_id="series_id", timestamp="timestamp", values=("value",))
    with pytest.raises(ValueError) as info:
        sources.check_columns(("series", "date", "value"), columns, "/in/x.csv")
    assert str(info.value) == (
        "'/in/x.csv' lacks column(s) ['series_id', 'timestamp']; its columns are "
        "['series', 'date', 'value']: pass --series_id_column=series "
        "--timestamp_column=date (the closest columns no other flag names).")


def test_check_columns_names_the_flag_the_user_typed_for_a_value_column():
    columns = Columns("id", "ts", ("sales", "prices"),
                      value_flags=(("--value_columns", ("sales",)),
                                   ("--known_columns", ("prices",))))
    with pytest.raises(ValueError, match=r"pass --known_columns=price \("):
        sources.check_columns(("id", "ts", "sales", "price"), columns, "/in/x.csv")


# --- read_labels ----------------------------------------------------------------------

def _labels_csv(tmp_path, text: str) -> str:
    path = tmp_path / "labels.csv"
    path.write_text(text, encoding="utf-8")
    return str(path)


def _labels_jsonl(tmp_path, objects: list) -> str:
    path = tmp_path / "labels.jsonl"
    path.write_text("".join(json.dumps(o) + "\n" for o in objects), encoding="utf-8")
    return str(path)


def _summary(rejections: list[Rejection]) -> list[tuple[str, str, str]]:
    return [(r.key, r.source, r.reason) for r in rejections]


def test_read_labels_csv_maps_series_to_label(tmp_path):
    path = _labels_csv(tmp_path, "id,label,note\na,cat,x\nb, dog ,y\n\nc,cat,z\n")
    assert sources.read_labels(path, "id") == (
        {"a": "cat", "b": "dog", "c": "cat"}, [])


def test_read_labels_csv_custom_label_column(tmp_path):
    path = _labels_csv(tmp_path, "kind,id\ncat,a\n")
    assert sources.read_labels(path, "id", "kind") == ({"a": "cat"}, [])


def test_read_labels_jsonl_maps_series_to_label(tmp_path):
    path = _labels_jsonl(tmp_path, [{"id": "a", "label": "cat"}, {"id": 7, "label": 1}])
    assert sources.read_labels(path, "id") == ({"a": "cat", "7": "1"}, [])


def test_read_labels_conflicting_labels_drop_the_series_csv(tmp_path):
    path = _labels_csv(tmp_path, "id,label\na,cat\nb,dog\na,cow\nc,cat\n")
    labels, rejections = sources.read_labels(path, "id")
    assert labels == {"b": "dog", "c": "cat"}
    assert _summary(rejections) == [("a", path, "conflicting_label")]


def test_read_labels_conflicting_labels_drop_the_series_jsonl(tmp_path):
    path = _labels_jsonl(tmp_path, [{"id": "a", "label": "cat"}, {"id": "a", "label": "cow"},
                                    {"id": "a", "label": "cat"}, {"id": "b", "label": "x"}])
    labels, rejections = sources.read_labels(path, "id")
    assert labels == {"b": "x"}
    assert _summary(rejections) == [("a", path, "conflicting_label")]


def test_read_labels_conflicts_are_reported_sorted_by_series(tmp_path):
    path = _labels_csv(tmp_path, "id,label\nz,1\ny,1\nz,2\ny,2\n")
    labels, rejections = sources.read_labels(path, "id")
    assert labels == {}
    assert [r.key for r in rejections] == ["y", "z"]


def test_read_labels_same_label_twice_is_kept_once(tmp_path):
    path = _labels_csv(tmp_path, "id,label\na,cat\na,cat\na, cat\n")
    assert sources.read_labels(path, "id") == ({"a": "cat"}, [])


@pytest.mark.parametrize("label", ["", "   "])
def test_read_labels_empty_label_is_missing_label_csv(tmp_path, label):
    path = _labels_csv(tmp_path, f"id,label\na,{label}\nb,dog\n")
    labels, rejections = sources.read_labels(path, "id")
    assert labels == {"b": "dog"}
    assert _summary(rejections) == [("a", f"{path}:2", "missing_label")]


@pytest.mark.parametrize("obj", [{"id": "a", "label": ""}, {"id": "a", "label": None},
                                 {"id": "a"}])
def test_read_labels_empty_label_is_missing_label_jsonl(tmp_path, obj):
    path = _labels_jsonl(tmp_path, [{"id": "b", "label": "dog"}, obj])
    labels, rejections = sources.read_labels(path, "id")
    assert labels == {"b": "dog"}
    assert _summary(rejections) == [("a", f"{path}:2", "missing_label")]


def test_read_labels_rows_without_series_are_malformed(tmp_path):
    path = tmp_path / "labels.jsonl"
    path.write_text('{"label": "cat"}\n[1, 2]\nnot json\n{"id": "", "label": "x"}\n'
                    '{"id": "a", "label": "cat"}\n', encoding="utf-8")
    labels, rejections = sources.read_labels(str(path), "id")
    assert labels == {"a": "cat"}
    assert _summary(rejections) == [
        (f"{path}:{n}", f"{path}:{n}", "malformed_row") for n in (1, 2, 3, 4)]


def test_read_labels_csv_wrong_column_count_is_malformed(tmp_path):
    path = _labels_csv(tmp_path, "id,label\na,cat,extra\nb,dog\n")
    labels, rejections = sources.read_labels(path, "id")
    assert labels == {"b": "dog"}
    assert _summary(rejections) == [(f"{path}:2", f"{path}:2", "malformed_row")]


@pytest.mark.parametrize("header", ["series,label", "id,class", "id", ""])
def test_read_labels_csv_missing_columns_is_value_error(tmp_path, header):
    path = _labels_csv(tmp_path, f"{header}\n" if header else "")
    with pytest.raises(ValueError, match="needs columns 'id' and 'label'"):
        sources.read_labels(path, "id")


@pytest.mark.parametrize("objects", [
    [{"id": "a", "class": "cat"}, {"id": "b", "class": "dog"}],    # no "label" anywhere
    [{"series": "a", "label": "cat"}, {"series": "b", "label": "dog"}],  # no "id" anywhere
])
def test_read_labels_jsonl_missing_columns_is_value_error(tmp_path, objects):
    # The docstring: "Raises ValueError: if the file lacks the series or label column."
    path = _labels_jsonl(tmp_path, objects)
    with pytest.raises(ValueError):
        sources.read_labels(path, "id")


def test_read_labels_csv_tolerates_utf8_bom(tmp_path):
    path = _labels_csv(tmp_path, "\ufeffid,label\na,chat\n")
    assert sources.read_labels(path, "id") == ({"a": "chat"}, [])


def test_read_labels_jsonl_tolerates_utf8_bom(tmp_path):
    path = tmp_path / "labels.jsonl"
    path.write_text('\ufeff{"id": "a", "label": "été"}\n', encoding="utf-8")
    assert sources.read_labels(str(path), "id") == ({"a": "été"}, [])


def test_read_labels_other_format_is_value_error(tmp_path):
    path = tmp_path / "labels.parquet"
    path.write_bytes(b"")
    with pytest.raises(ValueError, match=r"must be \.csv or \.jsonl"):
        sources.read_labels(str(path), "id")


@pytest.mark.parametrize("text", ["1_000", "2_0.5"])
def test_parse_value_rejects_digit_separators(text):
    with pytest.raises(ValueError, match="plain number"):
        sources.parse_value(text)


@pytest.mark.parametrize("text", ["n/a", "NA", "Null", "NONE", " nan "])
def test_parse_value_missing_words_are_case_insensitive(text):
    assert math.isnan(sources.parse_value(text))


def test_read_labels_blank_series_id_is_malformed_row(tmp_path):
    path = tmp_path / "labels.csv"
    path.write_text("series_id,label\n   ,cat\ns1,dog\n")
    labels, rejected = sources.read_labels(str(path), "series_id")
    assert labels == {"s1": "dog"}
    assert [r.reason for r in rejected] == ["malformed_row"]


# --- values that do not fit float32 ---------------------------------------------------

@pytest.mark.parametrize(("a", "b", "column"), [
    ("1e39", "2", "a"), ("-1e39", "2", "a"), ("1", "1e308", "b"), ("1", -3.5e38, "b"),
])
def test_parse_row_value_beyond_float32_is_value_out_of_range(a, b, column):
    result = sources.parse_row({"id": "s1", "ts": "5", "a": a, "b": b}, COLUMNS,
                                          SOURCE)
    assert isinstance(result, Rejection)
    assert (result.key, result.source, result.reason) == ("s1@5", SOURCE,
                                                          "value_out_of_range")
    assert result.message.startswith(f"Column {column!r}: ")
    assert "float32" in result.message


@pytest.mark.parametrize("value", [3.4028234663852886e38, "3.4028235e38", -3.4028235e38,
                                   "1e-50", "0"])
def test_parse_row_values_that_round_into_float32_are_kept(value):
    result = sources.parse_row({"id": "s1", "ts": "5", "a": value, "b": "1"},
                                          COLUMNS, SOURCE)
    assert isinstance(result, Row)


def test_fits_float32_boundary_matches_numpy_rounding():
    import warnings

    import numpy as np

    limit = sources.FLOAT32_OVERFLOW
    below = float(np.nextafter(limit, 0.0))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # numpy warns on the overflow.
        for value in (limit, below, -limit, -below, 1e39, 3e38):
            assert sources.fits_float32(value) == bool(
                np.isfinite(np.float32(value))), value
    assert sources.fits_float32(math.nan)
