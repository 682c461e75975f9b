"""Unit tests of etl/timeseries/rows/ranges.py: read tasks and the lines each owns."""

from __future__ import annotations

import random

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from etl.timeseries.rows import ranges
from etl.timeseries.rows.ranges import (
    InputRange,
    count_line_breaks,
    find_long_line,
    first_line_numbers,
    line_too_long,
    long_line,
    plan_parquet_ranges,
    plan_text_ranges,
    read_owned_lines,
)
from etl.timeseries.rows.sources import Columns


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


def test_line_too_long_names_the_file_the_line_and_the_flag():
    assert str(line_too_long("/in/rows.csv", 7, 64 * 2**20)) == (
        "Line 7 of '/in/rows.csv' is longer than --max_line_mb=64 (67108864 bytes): raise "
        "--max_line_mb (at most 1024) to read it.")


def test_long_line_gives_the_longest_line_at_or_over_the_length():
    block = b"ab\n" + b"x" * 10 + b"\n" + b"y" * 7 + b"\n" + b"z" * 12
    assert long_line(block, 5) == (3, 12)
    assert long_line(block, 12) == (3, 12)
    assert long_line(block, 13) is None
    assert long_line(block + b"\n" + b"w" * 12 + b"\n", 12) == (3, 12)  # the first
    assert long_line(b"", 1) is None


def _lines(rng: random.Random, length: int) -> tuple[list[bytes], bytes]:
    """Lines of up to half ``length`` bytes but one of ``length`` +- 2, anywhere: the
    lengths and places where a window check could miss a line."""
    lines = [b"x" * rng.randint(0, length // 2 + 1) for _ in range(rng.randint(0, 7))]
    lines.insert(rng.randint(0, len(lines)), b"x" * max(0, length + rng.randint(-2, 2)))
    return lines, b"\n".join(lines) + (b"\n" if rng.random() < 0.5 else b"")


def test_long_line_agrees_with_measuring_every_line():
    rng = random.Random(59)
    for _ in range(3000):
        min_length = rng.randint(1, 40)
        lines, block = _lines(rng, min_length)
        longest = max(len(line) for line in lines)
        expected = ((max(range(len(lines)), key=lambda k: (len(lines[k]), -k)), longest)
                    if longest >= min_length else None)
        assert long_line(block, min_length) == expected, (block, min_length)


def test_find_long_line_numbers_the_first_line_longer_than_the_limit(tmp_path):
    path = tmp_path / "rows.csv"
    path.write_bytes(b"h\n" + b"a" * 5 + b"\n" + b"b" * 12 + b"\n" + b"c" * 20)
    size = path.stat().st_size
    assert find_long_line(str(path), size, 11) == 3
    assert find_long_line(str(path), size, 12) == 4  # a line as long as the limit is read
    assert find_long_line(str(path), size, 20) is None


def test_find_long_line_opens_no_file_under_half_the_limit(tmp_path):
    # Every line of a file under max_line_bytes // 2 + 1 bytes fits: nothing is read.
    assert find_long_line(str(tmp_path / "absent.csv"), 50, 100) is None
    with pytest.raises(OSError):
        find_long_line(str(tmp_path / "absent.csv"), 51, 100)


def test_find_long_line_agrees_with_measuring_every_line(tmp_path, monkeypatch):
    # Probes and scans of 2 and 3 bytes: windows cross their reads' edges.
    monkeypatch.setattr(ranges, "_PROBE_BYTES", 2)
    monkeypatch.setattr(ranges, "_SCAN_BYTES", 3)
    rng = random.Random(7)
    path = tmp_path / "rows.csv"
    for _ in range(120):
        limit = rng.randint(1, 36)
        lines, data = _lines(rng, limit)
        path.write_bytes(data)
        over = [k + 1 for k, line in enumerate(lines) if len(line) > limit]
        assert find_long_line(str(path), len(data), limit) == (over[0] if over else None), (
            data, limit)


def test_read_owned_lines_stops_reading_a_line_once_longer_than_the_limit(tmp_path,
                                                                          monkeypatch):
    monkeypatch.setattr(ranges, "_READ_TAIL_BYTES", 4)
    path = tmp_path / "rows.csv"
    path.write_bytes(b"ab\n" + b"x" * 50 + b"\n")
    task = InputRange(0, 0, str(path), 0, 4)
    # Tail reads of 4 bytes until they hold more than 10: 12 bytes after the range's.
    assert read_owned_lines(task, max_line_bytes=10) == (b"ab\n" + b"x" * 13, 0)
    assert read_owned_lines(task) == (b"ab\n" + b"x" * 50 + b"\n", 0)
