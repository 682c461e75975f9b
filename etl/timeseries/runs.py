"""Window runs: the unit the time-series shards are made of, and where their rows wait.

The series step cleans and splits each series once, then cuts every piece's windows
into *runs* of at most ``run_windows`` consecutive windows and writes, per run, the
rows those windows cover (float32, as stored) and their start texts to a spill file
(one per bucket of series, under the job's temporary directory). A run crosses the
next stage boundaries as a small ``WindowRun`` record naming its byte range; the
shard step reads it back, cuts the windows and writes them. So overlapping windows
(``window_size / shift`` times the rows) exist only inside the shard step, one run
at a time, and a series far larger than a shard is spread over several shards.

Spill layout of a run, from ``offset``: ``num_rows × F`` little-endian float32
values, then the UTF-8 start texts of its windows back to back, then their end
offsets in that text block as ``num_windows`` little-endian int64, then (only for
``--calendar_features``) the rows' timestamps as ``num_rows`` little-endian int64
whole seconds since the epoch, then (only with categorical columns) ``num_rows × Fc``
little-endian int32 codes into the run's own category texts, those texts back to
back (UTF-8) and their ``num_categories`` end offsets as little-endian int64.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any, BinaryIO, NamedTuple

import numpy as np

from etl.core.io import storage
from etl.core.shards.plan import PlanShards
from etl.timeseries.series import Windowing

# Serialized bytes of one run, about: bounds the shard step's memory per run and the
# granularity at which a series' windows are spread over shards.
RUN_BYTES = 8 * 1024 * 1024


@dataclasses.dataclass(frozen=True)
class WindowRun:
    """Consecutive windows of one piece of one series, and where their rows are."""

    split: str
    key: str  # the first window's key, <series_id>@<window_start>: places the run
    series_id: str
    label: str | None
    source: str  # the series' first input row, for dead letters of its windows
    spill_path: str
    offset: int
    num_rows: int
    num_windows: int
    text_bytes: int
    num_bytes: int  # serialized bytes of its examples (a label id counted as 1 byte)
    num_categories: int = 0  # distinct category texts of its rows
    category_bytes: int = 0  # their UTF-8 bytes

    def identity(self) -> str:
        """What of the run shapes its examples, for a resumed run's records: all but
        where this run spilled its rows."""
        return repr((self.split, self.key, self.series_id, self.label, self.source,
                     self.num_rows, self.num_windows, self.text_bytes, self.num_bytes))

    def spill_bytes(self, num_features: int, with_times: bool = False,
                    num_categoricals: int = 0) -> int:
        return (4 * self.num_rows * num_features + self.text_bytes + 8 * self.num_windows
                + (8 * self.num_rows if with_times else 0)
                + (4 * self.num_rows * num_categoricals + self.category_bytes
                   + 8 * self.num_categories if num_categoricals else 0))


class RunRows(NamedTuple):
    """A run's rows as the spill holds them."""

    values: np.ndarray  # float32 [num_rows, F]
    starts: list[str]  # the start text of each window
    times: np.ndarray | None  # int64 [num_rows] seconds, with --calendar_features
    codes: np.ndarray | None  # int32 [num_rows, Fc] into categories, with categoricals
    categories: list[str]


def run_windows(example_bytes: int) -> int:
    """Windows per run for examples of about ``example_bytes`` each."""
    return max(1, RUN_BYTES // max(1, example_bytes))


def run_bounds(count: int, per_run: int) -> list[tuple[int, int]]:
    """``(first window, window count)`` of each run of a piece with ``count`` windows."""
    return [(first, min(per_run, count - first)) for first in range(0, count, per_run)]


def rows_of(num_windows: int, windowing: Windowing) -> int:
    """Rows the windows ``0 .. num_windows - 1`` of a piece cover, targets included."""
    return 0 if num_windows == 0 else (num_windows - 1) * windowing.shift + windowing.span


def _texts_bytes(texts: Sequence[str]) -> tuple[bytes, bytes]:
    """UTF-8 texts back to back, and their end offsets as little-endian int64."""
    encoded = [t.encode() for t in texts]
    return b"".join(encoded), np.cumsum([len(t) for t in encoded], dtype="<i8").tobytes()


def _texts_from(data: bytes, at: int, num_bytes: int, count: int) -> list[str]:
    blob = data[at:at + num_bytes]
    ends = np.frombuffer(data, "<i8", count, at + num_bytes).tolist()
    return [blob[a:b].decode() for a, b in zip([0, *ends[:-1]], ends, strict=True)]


def write_run(out: BinaryIO, values: np.ndarray, starts: list[str],
              times: np.ndarray | None = None,
              categories: tuple[np.ndarray, list[str]] | None = None
              ) -> tuple[int, int, int]:
    """Appends a run's rows ``[rows, F]``, start texts, (if given) the rows'
    timestamps (seconds since the epoch, floored) and (if given) the rows' categorical
    codes ``[rows, Fc]`` with the texts they index; returns (bytes, start text bytes,
    category text bytes)."""
    blob, ends = _texts_bytes(starts)
    data = np.ascontiguousarray(values, dtype="<f4").tobytes() + blob + ends
    if times is not None:
        data += np.floor(times).astype("<i8").tobytes()
    category_bytes = 0
    if categories is not None:
        codes, texts = categories
        category_blob, category_ends = _texts_bytes(texts)
        data += np.ascontiguousarray(codes, dtype="<i4").tobytes() + category_blob + (
            category_ends)
        category_bytes = len(category_blob)
    out.write(data)
    return len(data), len(blob), category_bytes


def read_run(run: WindowRun, num_features: int, with_times: bool = False,
             num_categoricals: int = 0) -> RunRows:
    """A run's rows ``[num_rows, F]`` (float32), the start texts of its windows,
    ``with_times`` the rows' timestamps (int64 seconds) and, with
    ``num_categoricals``, the rows' codes and the category texts they index."""
    with storage.open_read(run.spill_path) as f:
        f.seek(run.offset)
        data = f.read(run.spill_bytes(num_features, with_times, num_categoricals))
    value_bytes = 4 * run.num_rows * num_features
    values = np.frombuffer(data, "<f4", run.num_rows * num_features).reshape(
        run.num_rows, num_features)
    starts = _texts_from(data, value_bytes, run.text_bytes, run.num_windows)
    at = value_bytes + run.text_bytes + 8 * run.num_windows
    times = None
    if with_times:
        times = np.frombuffer(data, "<i8", run.num_rows, at)
        at += 8 * run.num_rows
    codes, categories = None, []
    if num_categoricals:
        codes = np.frombuffer(data, "<i4", run.num_rows * num_categoricals, at).reshape(
            run.num_rows, num_categoricals)
        categories = _texts_from(data, at + codes.nbytes, run.category_bytes,
                                 run.num_categories)
    return RunRows(values.astype(np.float32, copy=False), starts, times, codes, categories)


def _run_size(run: WindowRun) -> tuple[int, int]:
    return 1, run.num_bytes


def _run_bytes(split: str, sizes: tuple[int, ...], estimates: Mapping[str, Any]) -> int:
    del split, estimates  # The runs' bytes are exact.
    return sizes[1]


class PlanRunShards(PlanShards):
    """``WindowRun``s → ``(split, num_shards)``: ``--num_shards``, or the split's exact
    serialized bytes over ``--target_shard_mb``; at most one shard per run (a run is
    written whole by one shard)."""

    def __init__(self, *, target_shard_bytes: int, num_shards: int | None) -> None:
        super().__init__(measure=_run_size, split_bytes=_run_bytes,
                         target_shard_bytes=target_shard_bytes, num_shards=num_shards)
