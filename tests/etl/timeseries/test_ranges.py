"""Unit tests of etl/timeseries/ranges.py: read tasks and the lines each owns."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from etl.timeseries.ranges import (
    InputRange,
    count_line_breaks,
    first_line_numbers,
    plan_parquet_ranges,
    plan_text_ranges,
    read_owned_lines,
)
from etl.timeseries.sources import Columns


def test_plan_text_ranges_cuts_every_file_and_keeps_an_empty_one():
    assert plan_text_ranges([("a.csv", 10), ("b.csv", 0)], range_bytes=4) == [
        InputRange(0, 0, "a.csv", 0, 4), InputRange(0, 1, "a.csv", 4, 8),
        InputRange(0, 2, "a.csv", 8, 10), InputRange(1, 0, "b.csv", 0, 0)]


def test_plan_parquet_ranges_numbers_rows_across_row_groups(tmp_path):
    path = str(tmp_path / "rows.parquet")
    pq.write_table(pa.table({"id": ["a"] * 5, "ts": [1, 2, 3, 4, 5], "v": [0.0] * 5}),
                   path, row_group_size=2)
    assert plan_parquet_ranges([path], Columns("id", "ts", ("v",))) == [
        InputRange(0, 0, path, 0, 1), InputRange(0, 1, path, 1, 3),
        InputRange(0, 2, path, 2, 5)]


def test_plan_parquet_ranges_missing_column_is_value_error(tmp_path):
    path = str(tmp_path / "rows.parquet")
    pq.write_table(pa.table({"id": ["a"], "ts": [1]}), path)
    with pytest.raises(ValueError, match=r"lacks column\(s\) \['v'\]; its columns are "
                                         r"\['id', 'ts'\]"):
        plan_parquet_ranges([path], Columns("id", "ts", ("v",)))


@pytest.mark.parametrize(("start", "end", "lines", "skipped"), [
    (0, 4, b"ab\ncd\n", 0),   # owns the lines starting at bytes 0 and 3
    (3, 4, b"cd\n", 0),       # starts a line: finishes it past the range's end
    (4, 9, b"ef\n", 1),       # starts inside "cd": the range before owns that line
    (4, 5, b"", 0),           # no line starts inside
])
def test_read_owned_lines_reads_the_lines_that_start_in_the_range(tmp_path, start, end,
                                                                  lines, skipped):
    path = tmp_path / "rows.csv"
    path.write_bytes(b"ab\ncd\nef\n")
    task = InputRange(0, 0, str(path), start, end)
    assert read_owned_lines(task) == (lines, skipped)


def test_count_line_breaks_counts_inside_the_range_only(tmp_path):
    path = tmp_path / "rows.csv"
    path.write_bytes(b"ab\ncd\nef\n")
    assert count_line_breaks(InputRange(2, 5, str(path), 1, 6)) == ((2, 5), 2)


def test_first_line_numbers_sums_the_earlier_ranges_of_the_same_file():
    counts = [((0, 1), 2), ((0, 0), 3), ((1, 0), 5), ((0, 2), 4)]
    assert first_line_numbers(counts) == {(0, 0): 0, (0, 1): 3, (0, 2): 5, (1, 0): 0}
