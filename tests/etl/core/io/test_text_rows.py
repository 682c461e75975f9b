"""Unit tests of etl/core/io/text_rows.py: CSV and JSON Lines rows, one line each, and
image manifests' rows as RFC 4180 CSV reads them."""

from __future__ import annotations

import pytest

from etl.core.io import text_rows

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


# --- numbered_rows --------------------------------------------------------------------

Row = text_rows.NumberedRow


def rows_of(tmp_path, data: bytes, skip_header: bool = True, csv_quoting: bool = True
            ) -> list[text_rows.NumberedRow]:
    path = tmp_path / "rows.txt"
    path.write_bytes(data)
    return list(text_rows.numbered_rows(str(path), skip_header, csv_quoting))


def test_numbered_rows_skip_header_and_blank_lines_and_strip_bom_and_line_breaks(tmp_path):
    data = "\ufeffa,b\r\n1,2\n\n  \n3,4".encode()
    assert rows_of(tmp_path, data, skip_header=False) == [
        Row(1, 1, "a,b"), Row(2, 2, "1,2"), Row(5, 5, "3,4")]
    assert rows_of(tmp_path, data) == [Row(2, 2, "1,2"), Row(5, 5, "3,4")]


def test_numbered_rows_csv_row_with_quoted_line_breaks_spans_lines(tmp_path):
    data = b'path,label\r\na.png,cat\r\n"b, c.png","big\ncat ""x""\r\nz"\r\nd.png,dog\r\n'
    rows = rows_of(tmp_path, data)
    assert rows == [Row(2, 2, "a.png,cat"),
                    Row(3, 5, '"b, c.png","big\ncat ""x""\r\nz"'),
                    Row(6, 6, "d.png,dog")]
    assert text_rows.parse_csv_line(rows[1].text, ("path", "label")) == {
        "path": "b, c.png", "label": 'big\ncat "x"\r\nz'}


def test_numbered_rows_jsonl_rows_are_lines(tmp_path):
    data = b'{"path": "a\\n.png"}\n"unclosed\n{}\n'
    assert rows_of(tmp_path, data, skip_header=False, csv_quoting=False) == [
        Row(1, 1, '{"path": "a\\n.png"}'), Row(2, 2, '"unclosed'), Row(3, 3, "{}")]


def test_numbered_rows_row_that_is_not_utf8_says_so_and_shows_the_byte(tmp_path):
    data = b'path,label\na.png,caf\xe9\n"b.png","x\n\xff"\nc.png,cat\n'
    assert rows_of(tmp_path, data) == [
        Row(2, 2, "a.png,caf\\xe9", "not UTF-8 text (byte 0xE9 on line 2)"),
        Row(3, 4, '"b.png","x\n\\xff"', "not UTF-8 text (byte 0xFF on line 4)"),
        Row(5, 5, "c.png,cat")]


def test_numbered_rows_hand_on_a_row_csv_refuses_and_read_on(tmp_path):
    # A carriage return inside an unquoted field: the csv module refuses the row, and
    # so does parse_csv_line; the next line is a row again.
    rows = rows_of(tmp_path, b"path,label\na.png,c\rat\nb.png,dog\n")
    assert rows == [Row(2, 2, "a.png,c\rat"), Row(3, 3, "b.png,dog")]
    assert text_rows.parse_csv_line(rows[0].text, ("path", "label")) is None


def test_parse_csv_line_reads_a_field_over_the_csv_modules_limit():
    # The csv module refuses a field over 128 KiB; a line of plain fields is read all
    # the same, with the fields str.split gives it.
    value = "é" * 200_000
    assert text_rows.parse_csv_line(f"a,1,{value}\n", ("id", "t", "v")) == {
        "id": "a", "t": "1", "v": value}
    assert text_rows.parse_csv_line(f'a,"1",{value}', ("id", "t", "v")) is None
    assert text_rows.parse_csv_line(f"a,1\r,{value}", ("id", "t", "v")) is None
    assert text_rows.parse_csv_line(f"a,{value}", ("id", "t", "v")) is None
