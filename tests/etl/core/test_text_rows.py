"""Unit tests of etl/core/text_rows.py: CSV and JSON Lines rows, one line each."""

from __future__ import annotations

import pytest

from etl.core import text_rows

HEADER = ("path", "label", "split")


# --- parse_csv_line / parse_jsonl_line ------------------------------------------------

def test_parse_csv_line_handles_quoted_commas():
    assert text_rows.parse_csv_line('"a, b.png","big, cat",val', HEADER) == {
        "path": "a, b.png", "label": "big, cat", "split": "val"}


def test_parse_csv_line_keeps_empty_trailing_column():
    assert text_rows.parse_csv_line("a.png,cat,", HEADER) == {
        "path": "a.png", "label": "cat", "split": ""}


@pytest.mark.parametrize("line", ["a.png,cat", "a.png,cat,train,extra", "", "a.png"])
def test_parse_csv_line_wrong_column_count_is_none(line):
    assert text_rows.parse_csv_line(line, HEADER) is None


def test_parse_jsonl_line_reads_object():
    assert text_rows.parse_jsonl_line('{"path": "a.png", "label": "cat"}') == {
        "path": "a.png", "label": "cat"}


@pytest.mark.parametrize("line", ['["a.png", "cat"]', '"a.png"', "3", "null",
                                  "{not json", ""])
def test_parse_jsonl_line_non_object_is_none(line):
    assert text_rows.parse_jsonl_line(line) is None


def test_parse_csv_line_later_duplicate_column_wins():
    assert text_rows.parse_csv_line("1,2", ("a", "a")) == {"a": "2"}


def test_csv_fields_strips_and_refuses_stray_carriage_returns():
    assert text_rows.csv_fields(" id , ts ,value") == ("id", "ts", "value")
    with pytest.raises(ValueError, match="Unreadable CSV header"):
        text_rows.csv_fields("id,t\rs")


def test_numbered_lines_skip_header_and_strip_bom_and_line_breaks(tmp_path):
    path = tmp_path / "rows.csv"
    path.write_bytes("\ufeffa,b\r\n1,2\n\n3,4".encode())
    assert list(text_rows.numbered_lines(str(path), skip_header=False)) == [
        (1, "a,b"), (2, "1,2"), (3, ""), (4, "3,4")]
    assert list(text_rows.numbered_lines(str(path), skip_header=True)) == [
        (2, "1,2"), (3, ""), (4, "3,4")]


def test_numbered_lines_strip_bom_from_first_jsonl_line(tmp_path):
    path = tmp_path / "bom.jsonl"
    path.write_bytes('\ufeff{"path": "a.png", "label": "cat"}\n'.encode())
    lines = list(text_rows.numbered_lines(str(path), skip_header=False))
    assert lines == [(1, '{"path": "a.png", "label": "cat"}')]
