"""Rejected inputs: stable reason codes, the record type, and the errors/ writer."""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Iterable, Iterator
from typing import Any

import apache_beam as beam

from etl import contract

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
INCONSISTENT_TIMESTAMPS = "inconsistent_timestamps"
DUPLICATE_TIMESTAMP = "duplicate_timestamp"
MISSING_VALUE = "missing_value"
SERIES_TOO_SHORT = "series_too_short"
UNLABELLED_SERIES = "unlabelled_series"
CONFLICTING_LABEL = "conflicting_label"
# Limits and input hygiene.
FILE_TOO_LARGE = "file_too_large"
IMAGE_TOO_LARGE = "image_too_large"
DUPLICATE_KEY = "duplicate_key"
PATH_OUTSIDE_ROOT = "path_outside_root"
UNKNOWN_LABEL = "unknown_label"

REASONS: tuple[str, ...] = (
    UNREADABLE_FILE, EMPTY_FILE, UNDECODABLE_IMAGE, UNSUPPORTED_FORMAT,
    MISSING_LABEL, INVALID_LABEL, INVALID_SPLIT, MALFORMED_MANIFEST_ROW,
    MALFORMED_ROW, MISSING_SERIES_ID, UNPARSABLE_TIMESTAMP, UNPARSABLE_VALUE,
    INCONSISTENT_TIMESTAMPS, DUPLICATE_TIMESTAMP, MISSING_VALUE, SERIES_TOO_SHORT,
    UNLABELLED_SERIES, CONFLICTING_LABEL, FILE_TOO_LARGE, IMAGE_TOO_LARGE, DUPLICATE_KEY,
    PATH_OUTSIDE_ROOT, UNKNOWN_LABEL,
)
# Examples of each reason kept in the manifest and in error messages.
EXAMPLES_PER_REASON = 3

METRICS_NAMESPACE = "etl"
# Tag of the dead-letter output of every DoFn that can reject an input.
REJECTED = "rejected"


@dataclasses.dataclass(frozen=True)
class Rejection:
    """One input that could not become an example, and why."""

    key: str
    source: str
    reason: str
    message: str

    def __post_init__(self) -> None:
        if self.reason not in REASONS:
            raise ValueError(f"Unknown rejection reason {self.reason!r}.")

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), sort_keys=True, ensure_ascii=False)


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


def _write_sorted_jsonl(rejections: Iterable[Rejection], path: str) -> dict[str, Any]:
    import tensorflow as tf

    ordered = sorted(rejections, key=lambda r: (r.key, r.source, r.reason, r.message))
    by_reason: dict[str, int] = {}
    examples: dict[str, list[dict[str, str]]] = {}
    for rejection in ordered:
        by_reason[rejection.reason] = by_reason.get(rejection.reason, 0) + 1
        kept = examples.setdefault(rejection.reason, [])
        if len(kept) < EXAMPLES_PER_REASON:
            kept.append({"key": rejection.key, "message": rejection.message})
    tf.io.gfile.makedirs(os.path.dirname(path))
    tmp_path = path + ".incomplete"
    with tf.io.gfile.GFile(tmp_path, "w") as f:
        # One write call, even when empty: GFile creates the file on first write.
        f.write("".join(rejection.to_json() + "\n" for rejection in ordered))
    tf.io.gfile.rename(tmp_path, path, overwrite=True)
    return {"count": len(ordered), "by_reason": dict(sorted(by_reason.items())),
            "examples": dict(sorted(examples.items()))}


class WriteRejections(beam.PTransform):
    """Writes all rejections, sorted by key, to ``<output_dir>/errors/rejected.jsonl``.

    Returns a single-element PCollection ``{"count": N, "by_reason": {...},
    "examples": {reason: [{"key", "message"}, ...]}}`` for the manifest. Rejections
    are gathered on one worker, which ``--max_error_fraction`` keeps bounded.
    """

    def __init__(self, output_dir: str) -> None:
        super().__init__()
        self._path = os.path.join(output_dir, contract.ERRORS_DIRNAME,
                                  contract.REJECTED_FILENAME)

    def expand(self, rejections: beam.PCollection) -> beam.PCollection:
        return (
            rejections
            | "GatherRejections" >> beam.combiners.ToList()
            | "WriteRejectionsFile" >> beam.Map(_write_sorted_jsonl, path=self._path)
        )
