"""Rejected inputs: stable reason codes, the record type, and the errors/ writer."""

from __future__ import annotations

import dataclasses
import json
import posixpath
from collections.abc import Iterable, Iterator
from typing import Any

import apache_beam as beam

from etl.core import hashing, singletons
from etl.core.io import storage
from reader.format import contract

METRICS_NAMESPACE = "etl"
# Tag of the dead-letter output of every DoFn that can reject an input.
REJECTED = "rejected"

# Stable reason codes. They appear in errors/rejected.jsonl, the manifest and the
# Beam counters, so they are part of the contract: add new ones, never rename.
UNREADABLE_FILE = "unreadable_file"
EMPTY_FILE = "empty_file"
UNDECODABLE_IMAGE = "undecodable_image"
UNSUPPORTED_FORMAT = "unsupported_format"
MISSING_LABEL = "missing_label"
INVALID_LABEL = "invalid_label"
INVALID_SPLIT = "invalid_split"
MALFORMED_MANIFEST_ROW = "malformed_manifest_row"
# Time series.
MALFORMED_ROW = "malformed_row"
MISSING_SERIES_ID = "missing_series_id"
UNPARSABLE_TIMESTAMP = "unparsable_timestamp"
UNPARSABLE_VALUE = "unparsable_value"
VALUE_OUT_OF_RANGE = "value_out_of_range"
INCONSISTENT_TIMESTAMPS = "inconsistent_timestamps"
DUPLICATE_TIMESTAMP = "duplicate_timestamp"
MISSING_VALUE = "missing_value"
SERIES_TOO_SHORT = "series_too_short"
UNLABELLED_SERIES = "unlabelled_series"
CONFLICTING_LABEL = "conflicting_label"
WINDOW_OUT_OF_RANGE = "window_out_of_range"
# Time-series covariates (column roles).
STATIC_VARIES = "static_varies"
MISSING_STATIC = "missing_static"
NEGATIVE_UNDER_LOG1P = "negative_under_log1p"
CALENDAR_NEEDS_DATES = "calendar_needs_dates"
# Limits and input hygiene.
FILE_TOO_LARGE = "file_too_large"
IMAGE_TOO_LARGE = "image_too_large"
DUPLICATE_KEY = "duplicate_key"
PATH_OUTSIDE_ROOT = "path_outside_root"
UNKNOWN_LABEL = "unknown_label"
# A FIFO, socket or device where a file was expected (not opened: reading one can
# block forever); a read that did not finish within the job's read timeout.
NOT_A_REGULAR_FILE = "not_a_regular_file"
READ_TIMED_OUT = "read_timed_out"
# Image fidelity.
CORRUPT_IMAGE_DATA = "corrupt_image_data"
# Numeric targets and carried columns of image manifests.
MISSING_TARGET = "missing_target"
INVALID_TARGET = "invalid_target"
NON_FINITE_TARGET = "non_finite_target"
INVALID_CARRIED_VALUE = "invalid_carried_value"
# --append: a class the dataset's label vocabulary (fit by its first version) lacks.
LABEL_NOT_IN_DATASET = "label_not_in_dataset"
# --cross_split_duplicates=drop: a copy of an image another split keeps.
CROSS_SPLIT_DUPLICATE = "cross_split_duplicate"

REASONS: tuple[str, ...] = (
    UNREADABLE_FILE, EMPTY_FILE, UNDECODABLE_IMAGE, UNSUPPORTED_FORMAT,
    MISSING_LABEL, INVALID_LABEL, INVALID_SPLIT, MALFORMED_MANIFEST_ROW,
    MALFORMED_ROW, MISSING_SERIES_ID, UNPARSABLE_TIMESTAMP, UNPARSABLE_VALUE,
    INCONSISTENT_TIMESTAMPS, DUPLICATE_TIMESTAMP, MISSING_VALUE, SERIES_TOO_SHORT,
    UNLABELLED_SERIES, CONFLICTING_LABEL, FILE_TOO_LARGE, IMAGE_TOO_LARGE, DUPLICATE_KEY,
    PATH_OUTSIDE_ROOT, UNKNOWN_LABEL, CORRUPT_IMAGE_DATA, VALUE_OUT_OF_RANGE,
    WINDOW_OUT_OF_RANGE, MISSING_TARGET, INVALID_TARGET, NON_FINITE_TARGET,
    INVALID_CARRIED_VALUE, LABEL_NOT_IN_DATASET, STATIC_VARIES, MISSING_STATIC,
    NEGATIVE_UNDER_LOG1P, CALENDAR_NEEDS_DATES, CROSS_SPLIT_DUPLICATE,
    NOT_A_REGULAR_FILE, READ_TIMED_OUT,
)


class InputError(ValueError):
    """An input no dead letter can stand for (a line past ``--max_line_mb``): the job
    stops with its message as the one ``error:`` line, wherever it is found, a
    worker's read step included (``pipelines.common.main``)."""


# Examples of each reason kept in the manifest and in error messages.
EXAMPLES_PER_REASON = 3


@dataclasses.dataclass(frozen=True)
class Rejection:
    """One input that could not become an example, and why. A removed duplicate
    (``CROSS_SPLIT_DUPLICATE``) also names its ``split`` and the key of the copy
    kept (``duplicate_of``); other rejections leave both out."""

    key: str
    source: str
    reason: str
    message: str
    split: str | None = None
    duplicate_of: str | None = None

    def __post_init__(self) -> None:
        if self.reason not in REASONS:
            raise ValueError(f"Unknown rejection reason {self.reason!r}.")

    def to_json(self) -> str:
        fields = {name: value for name, value in dataclasses.asdict(self).items()
                  if value is not None}
        return json.dumps(fields, sort_keys=True, ensure_ascii=False)


def count_rejection(reason: str) -> None:
    """Increments the Beam counter ``rejected_<reason>`` (call from inside a DoFn)."""
    beam.metrics.Metrics.counter(METRICS_NAMESPACE, f"rejected_{reason}").inc()


def route(result: Any) -> Iterator[Any]:
    """Inside a DoFn: a ``Rejection`` goes, counted, to the ``REJECTED`` output;
    anything else to the main output."""
    if isinstance(result, Rejection):
        count_rejection(result.reason)
        yield beam.pvalue.TaggedOutput(REJECTED, result)
    else:
        yield result


# Rejections one worker sorts and writes at a time. Up to this many,
# errors/rejected.jsonl is one part: every line sorted by key.
REJECTIONS_PER_PART = 100_000
_PARTS_DIRNAME = "rejected.parts"


def _sort_key(rejection: Rejection) -> tuple[str, str, str, str]:
    return rejection.key, rejection.source, rejection.reason, rejection.message


def num_parts(count: int, per_part: int = REJECTIONS_PER_PART) -> int:
    """How many parts ``count`` rejections are written in (at least 1)."""
    return max(1, -(-count // per_part))


def part_of(rejection: Rejection, parts: int) -> int:
    """The part a rejection is sorted in: a stable hash of its key."""
    return hashing.stable_hash64(rejection.key, "rejection") % parts if parts > 1 else 0


class SummarizeRejections(beam.CombineFn):
    """Rejections → ``{"count", "by_reason", "examples"}``, the manifest's summary.

    ``examples`` keeps, per reason, the ``EXAMPLES_PER_REASON`` rejections first in
    key order, so the summary never depends on arrival order, and the accumulator
    stays small however many rejections there are.
    """

    def create_accumulator(self) -> dict[str, tuple[int, list[Rejection]]]:
        return {}

    def add_input(self, accumulator: dict[str, tuple[int, list[Rejection]]],
                  rejection: Rejection) -> dict[str, tuple[int, list[Rejection]]]:
        count, kept = accumulator.get(rejection.reason, (0, []))
        kept = sorted([*kept, rejection], key=_sort_key)[:EXAMPLES_PER_REASON]
        accumulator[rejection.reason] = (count + 1, kept)
        return accumulator

    def merge_accumulators(self, accumulators: Iterable[dict[str, tuple[int, list[Rejection]]]]
                           ) -> dict[str, tuple[int, list[Rejection]]]:
        merged: dict[str, tuple[int, list[Rejection]]] = {}
        for accumulator in accumulators:
            for reason, (count, kept) in accumulator.items():
                total, so_far = merged.get(reason, (0, []))
                merged[reason] = (total + count, sorted(
                    [*so_far, *kept], key=_sort_key)[:EXAMPLES_PER_REASON])
        return merged

    def extract_output(self, accumulator: dict[str, tuple[int, list[Rejection]]]
                       ) -> dict[str, Any]:
        reasons = sorted(accumulator)
        return {
            "count": sum(accumulator[r][0] for r in reasons),
            "by_reason": {r: accumulator[r][0] for r in reasons},
            "examples": {r: [{"key": x.key, "message": x.message}
                             for x in accumulator[r][1]] for r in reasons},
        }


def _write_part(element: tuple[int, Iterable[Rejection]], parts_dir: str) -> tuple[int, str]:
    """Writes one part, sorted by key, under a temporary name; returns (index, path)."""

    index, rejections = element
    path = posixpath.join(parts_dir, f"part-{index:05d}.jsonl")
    ordered = sorted(rejections, key=_sort_key)
    storage.write_text(path, "".join(rejection.to_json() + "\n" for rejection in ordered))
    return index, path


def _with_part(rejection: Rejection, summary: dict[str, Any], per_part: int
               ) -> tuple[int, Rejection]:
    return part_of(rejection, num_parts(summary["count"], per_part)), rejection


def _concatenate_parts(parts: list[tuple[int, str]], path: str, parts_dir: str,
                       summary: dict[str, Any], write_empty: bool = True
                       ) -> dict[str, Any]:
    """Streams the parts, in part order, into ``path`` (constant memory); returns
    ``summary``. With no rejection there is no part, and the file is empty (or, if
    not ``write_empty``, not written)."""
    if not parts and not write_empty:
        return summary
    with storage.write(path) as out:
        for _, part in sorted(parts):
            with storage.open_read(part) as f:
                while chunk := f.read(8 * 1024 * 1024):
                    out.write(chunk)
    storage.delete_tree(parts_dir)
    return summary


class WriteRejections(beam.PTransform):
    """Writes all rejections to ``<output_dir>/errors/rejected.jsonl`` (or ``relpath``:
    an appended version's own file), deterministically.

    Returns a single-element PCollection ``{"count": N, "by_reason": {...},
    "examples": {reason: [{"key", "message"}, ...]}}`` for the manifest.

    Memory stays bounded however many inputs are rejected: rejections are placed in
    ``ceil(N / REJECTIONS_PER_PART)`` parts by a stable hash of their key, each part
    is sorted by key and written by one worker, and the parts are then streamed into
    the one file in part order. Up to ``REJECTIONS_PER_PART`` rejections that is a
    single part, so the whole file is sorted by key.
    """

    def __init__(self, output_dir: str, per_part: int = REJECTIONS_PER_PART,
                 relpath: str | None = None, write_empty: bool = True) -> None:
        super().__init__()
        if per_part < 1:
            raise ValueError(f"per_part must be >= 1, got {per_part}.")
        errors_dir = posixpath.join(output_dir, contract.ERRORS_DIRNAME)
        self._path = posixpath.join(
            output_dir, relpath or f"{contract.ERRORS_DIRNAME}/{contract.REJECTED_FILENAME}")
        self._parts_dir = posixpath.join(errors_dir, _PARTS_DIRNAME)
        self._per_part = per_part
        self._write_empty = write_empty

    def expand(self, rejections: beam.PCollection) -> beam.PCollection:
        # {"count", "by_reason", "examples"}
        summary = singletons.combined(rejections, "SummarizeRejections",
                                      SummarizeRejections())
        written = (
            rejections
            # (part, Rejection)
            | "AssignRejectionParts" >> beam.Map(
                _with_part, summary=summary, per_part=self._per_part)
            # (part, [Rejection])
            | "GroupRejectionParts" >> beam.GroupByKey()
            # (part, path of the part's file)
            | "WriteRejectionParts" >> beam.Map(_write_part, parts_dir=self._parts_dir)
        )
        # the summary, once errors/rejected.jsonl is written
        return rejections.pipeline | "ConcatenateRejectionParts" >> singletons.Once(
            _concatenate_parts, parts=beam.pvalue.AsList(written), path=self._path,
            parts_dir=self._parts_dir, summary=summary, write_empty=self._write_empty)
