"""Unit tests of etl/timeseries/rows/chunks.py: rows cut per bucket, spilled, read back."""

from __future__ import annotations

import numpy as np
import pytest

from etl.timeseries.rows import chunks
from etl.timeseries.rows.parsing import csv_block_rows
from etl.timeseries.rows.sources import Columns

COLUMNS = Columns("id", "ts", ("v",))
HEADER = ("id", "ts", "v")


def _parsed(lines: list[str], file_index: int = 0):
    """The rows of CSV data ``lines``, the first being line 2 of ``x.csv``."""
    return csv_block_rows("".join(line + "\n" for line in lines).encode(), 2, HEADER,
                          COLUMNS, file_index, "x.csv")


@pytest.mark.parametrize(("total_bytes", "buckets"), [
    (0, 1), (64 * 2**20, 1), (64 * 2**20 + 1, 2), (640 * 2**20, 10), (2**50, 4096),
])
def test_num_buckets_is_one_per_64_mib_up_to_4096(total_bytes, buckets):
    assert chunks.num_buckets(total_bytes) == buckets


def test_to_chunks_orders_series_by_id_and_their_rows_by_input_position():
    [(bucket, chunk)] = list(chunks.to_chunks(_parsed(["b,1,1", "a,2,2", "b,0,3",
                                                       "a,1,4"]), 1))
    assert bucket == 0
    assert chunk.series_ids == ["a", "b"]
    assert chunk.slice_lengths.tolist() == [2, 2]
    assert chunk.positions.tolist() == [3, 5, 2, 4]
    assert chunk.values[:, 0].tolist() == [2.0, 4.0, 1.0, 3.0]
    assert list(chunk.slices()) == [("a", 1, slice(0, 2)), ("b", 1, slice(2, 4))]

def test_to_chunks_puts_each_series_in_its_bucket_once():
    lines = [f"s{i % 7},{i},1" for i in range(70)]
    parsed = csv_block_rows(
        "\n".join(lines).encode(), 2, ("id", "ts", "v"), Columns("id", "ts", ("v",)), 0,
        "x.csv")
    seen: dict[str, int] = {}
    for bucket, chunk in chunks.to_chunks(parsed, 3):
        for series_id, _, rows in chunk.slices():
            assert series_id not in seen
            seen[series_id] = bucket
            assert bucket == chunks.bucket_of(series_id, 3)
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
    parsed = csv_block_rows(block, 2, ("id", "ts", "v"), Columns("id", "ts", ("v",)), 0,
                            "x.csv")
    [(_, chunk)] = list(chunks.to_chunks(parsed, 1))
    assert chunk.text_style == style
    assert (chunk.texts is None) == (style is not None)
    assert chunk.time_texts().strings() == texts


def test_encoded_chunks_decode_to_the_same_rows():
    block = "".join(f"s{i % 3},{t},{i * 0.25}\n" for i, t in enumerate(
        ["5", "2024-01-02", "7", "x"] * 5)).encode()
    parsed = csv_block_rows(block, 2, ("id", "ts", "v"), Columns("id", "ts", ("v",)), 3,
                            "x.csv")
    for _, chunk in chunks.to_chunks(parsed, 2):
        back = chunks.decode_chunk(chunks.encode_chunk(chunk))
        assert back.series_ids == chunk.series_ids
        assert back.text_style == chunk.text_style
        for name in ("slice_lengths", "slice_kinds", "times", "values", "positions"):
            np.testing.assert_array_equal(getattr(back, name), getattr(chunk, name))
        assert back.time_texts().strings() == chunk.time_texts().strings()


def test_spill_chunks_then_read_chunks_gives_the_chunks_back_in_offset_order(tmp_path):
    parsed = _parsed([f"s{i},{i},{i}" for i in range(20)])
    cut = list(chunks.to_chunks(parsed, 3))
    path = str(tmp_path / "range.bin")
    refs = chunks.spill_chunks(cut, path)
    lengths = [len(chunks.encode_chunk(chunk)) for _, chunk in cut]
    assert [(bucket, ref.offset, ref.length, ref.rows) for bucket, ref in refs] == [
        (bucket, sum(lengths[:k]), lengths[k], len(chunk))
        for k, (bucket, chunk) in enumerate(cut)]
    back = list(chunks.read_chunks(reversed([ref for _, ref in refs])))
    assert [c.series_ids for c in back] == [c.series_ids for _, c in cut]


def test_spill_chunks_without_chunks_writes_no_file(tmp_path):
    assert chunks.spill_chunks([], str(tmp_path / "range.bin")) == []
    assert list(tmp_path.iterdir()) == []
