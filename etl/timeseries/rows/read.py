"""The read step: long-format inputs → per-bucket ``ChunkRef``s, rejections, row counts.

The driver plans the input (``InputPlan``: files, CSV headers, ``ranges``, buckets).
In the job, each range is parsed column by column (``parsing``) and cut into at most
one ``RowChunk`` per bucket of series, spilled to the range's file (``chunks``). Only
``(bucket, ChunkRef)`` records leave the step, so the runner never holds the input.
"""

from __future__ import annotations

import collections
import concurrent.futures
import dataclasses
import posixpath
from collections.abc import Iterator, Sequence
from typing import Any

import apache_beam as beam
from apache_beam.transforms import window

from etl.core import cores, dead_letters, singletons
from etl.core.dead_letters import Rejection
from etl.core.io import storage, text_rows
from etl.timeseries.rows.chunks import ChunkRef, num_buckets, spill_chunks, to_chunks
from etl.timeseries.rows.parsing import parse_range_rows
from etl.timeseries.rows.ranges import (
    DEFAULT_MAX_LINE_BYTES,
    RANGE_BYTES,
    InputRange,
    count_line_breaks,
    find_long_line,
    first_line_numbers,
    line_too_long,
    plan_parquet_ranges,
    plan_text_ranges,
)
from etl.timeseries.rows.sources import Columns, check_columns, input_format, matched_files

# Tagged output of the read step: (rows parsed into chunks) per range.
ROW_COUNTS = "row_counts"


def parse_range(task: InputRange, first_line: int, fmt: str, columns: Columns,
                header: tuple[str, ...], buckets: int, spill_dir: str,
                max_line_bytes: int = DEFAULT_MAX_LINE_BYTES
                ) -> tuple[list[Rejection], int, list[tuple[int, ChunkRef]]]:
    """Parses one range and spills its chunks: ``(rejections, rows, (bucket, ref)s)``.

    ``first_line`` is the number of the range's first line (1 + the line breaks
    before the range); unused for Parquet.
    """
    parsed = parse_range_rows(task, first_line, fmt, columns, header, max_line_bytes)
    path = posixpath.join(spill_dir, f"range-{task.file_index:05d}-{task.range_index:06d}.bin")
    refs = spill_chunks(to_chunks(parsed, buckets), path)
    return parsed.rejections, len(parsed.codes), refs


class ParseRange(beam.DoFn):
    """``InputRange`` → ``(bucket, ChunkRef)``s (the rows wait in the range's spill
    file under ``spill_dir``), tagged ``Rejection``s and ``(ROW_COUNTS, rows)``.

    Up to one range per core is parsed at once on a thread pool (pyarrow, numpy and
    file I/O release the GIL), since the local runner hands this step its ranges one
    at a time; outputs (and Beam counters) are emitted from the calling thread.
    """

    def __init__(self, fmt: str, columns: Columns, headers: Sequence[tuple[str, ...]],
                 buckets: int, spill_dir: str,
                 max_line_bytes: int = DEFAULT_MAX_LINE_BYTES) -> None:
        self._fmt = fmt
        self._columns = columns
        self._headers = list(headers)
        self._buckets = buckets
        self._spill_dir = spill_dir
        self._max_line_bytes = max_line_bytes

    def setup(self) -> None:
        self._threads = cores.usable()
        self._pool = concurrent.futures.ThreadPoolExecutor(self._threads,
                                                           thread_name_prefix="ParseRange")

    def teardown(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)

    def start_bundle(self) -> None:
        self._in_flight: collections.deque[concurrent.futures.Future] = collections.deque()

    def process(self, task: InputRange, line_breaks_before: dict[tuple[int, int], int]
                ) -> Iterator[Any]:
        first_line = 1 + line_breaks_before.get((task.file_index, task.range_index), 0)
        header = self._headers[task.file_index] if self._fmt == "csv" else ()
        self._in_flight.append(self._pool.submit(
            parse_range, task, first_line, self._fmt, self._columns, header,
            self._buckets, self._spill_dir, self._max_line_bytes))
        while len(self._in_flight) > self._threads:
            yield from self._emit(self._in_flight.popleft().result(), windowed=False)

    def finish_bundle(self) -> Iterator[Any]:
        while self._in_flight:
            yield from self._emit(self._in_flight.popleft().result(), windowed=True)

    @staticmethod
    def _emit(result: tuple[list[Rejection], int, list[tuple[int, ChunkRef]]],
              windowed: bool) -> Iterator[Any]:
        def wrap(value: Any) -> Any:
            return window.GlobalWindows.windowed_value(value) if windowed else value

        rejections, rows, refs = result
        for rejection in rejections:
            for output in dead_letters.route(rejection):
                yield beam.pvalue.TaggedOutput(output.tag, wrap(output.value))
        yield beam.pvalue.TaggedOutput(ROW_COUNTS, wrap(rows))
        for ref in refs:
            yield wrap(ref)


@dataclasses.dataclass(frozen=True)
class InputPlan:
    """What the driver learns about the input before the job runs."""

    fmt: str
    files: tuple[str, ...]
    headers: tuple[tuple[str, ...], ...]  # CSV only
    ranges: tuple[InputRange, ...]
    buckets: int
    # (path, size, mtime) of each file, as matched: what identifies the rows for a
    # resumed run's fingerprint.
    file_stats: tuple[tuple[str, int, float], ...] = ()
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES  # CSV and JSON Lines

    @classmethod
    def from_pattern(cls, pattern: str, columns: Columns,
                     range_bytes: int = RANGE_BYTES,
                     max_line_bytes: int = DEFAULT_MAX_LINE_BYTES) -> InputPlan:
        """Matches the files, checks their columns and cuts them into ranges.

        A local CSV or JSON Lines file is checked for a line longer than
        ``max_line_bytes`` (``find_long_line``: a 64 KiB probe every
        ``max_line_bytes / 2`` bytes). An object store's reader fetches 16 MiB at
        each probe, so there the read step finds such a line instead, and the run
        stops there with the same message.

        Raises:
            ValueError: for an unknown extension, no match, a missing column, or a
                line longer than ``max_line_bytes``.
        """
        fmt = input_format(pattern)
        matched = matched_files(pattern)
        files = tuple(info.path for info in matched)
        sizes = {info.path: info.size for info in matched}
        if fmt != "parquet":
            for path in files:
                line = None if storage.is_remote(path) else find_long_line(
                    path, sizes[path], max_line_bytes)
                if line is not None:
                    raise line_too_long(path, line, max_line_bytes)
        headers: tuple[tuple[str, ...], ...] = ()
        if fmt == "csv":
            headers = tuple(text_rows.read_csv_header(path) for path in files)
            for path, header in zip(files, headers, strict=True):
                check_columns(header, columns, path)
        if fmt == "parquet":
            ranges = plan_parquet_ranges(files, columns)
        else:
            ranges = plan_text_ranges([(path, sizes[path]) for path in files], range_bytes)
        stats = tuple((info.path, info.size, info.mtime) for info in matched)
        return cls(fmt, files, headers, tuple(ranges), num_buckets(sum(sizes.values())),
                   stats, max_line_bytes)


class ReadSeriesChunks(beam.PTransform):
    """Reads the input as ``(bucket, ChunkRef)`` plus tagged ``Rejection``s and
    per-range ``ROW_COUNTS``; every position is ``<file>:<line>``
    (``<file>:row<n>`` for Parquet). The chunks are written under ``spill_dir``."""

    def __init__(self, plan: InputPlan, columns: Columns, spill_dir: str) -> None:
        super().__init__()
        self._plan = plan
        self._columns = columns
        self._spill_dir = spill_dir

    def expand(self, pbegin: beam.pvalue.PBegin) -> Any:
        tasks = (
            pbegin
            | "ListRanges" >> beam.Create(list(self._plan.ranges))
            | "ReshuffleRanges" >> beam.Reshuffle()
        )
        if self._plan.fmt == "parquet":
            line_breaks: Any = {}
        else:
            counts = tasks | "CountLineBreaks" >> beam.Map(count_line_breaks)
            line_breaks = beam.pvalue.AsSingleton(
                pbegin | "LineBreaksBefore" >> singletons.Once(
                    first_line_numbers, counts=beam.pvalue.AsList(counts)))
        return tasks | "ParseRanges" >> beam.ParDo(
            ParseRange(self._plan.fmt, self._columns, self._plan.headers,
                       self._plan.buckets, self._spill_dir, self._plan.max_line_bytes),
            line_breaks_before=line_breaks
        # The row counts typed as the count of parse rejections they are flattened
        # with: Flink's and Spark's runners union a Flatten's inputs only when their
        # coders match (apache/beam#19365).
        ).with_output_types(Any, **{dead_letters.REJECTED: Any, ROW_COUNTS: int}).with_outputs(
                dead_letters.REJECTED, ROW_COUNTS, main="chunks")

