"""Every input accounted for: reconciliation and the error-fraction threshold.

Run on the finished manifest dict just before it is written. Raising here means
no manifest is published, so a dataset whose counts do not add up, or with too
many rejected inputs, never becomes visible to readers.
"""

from __future__ import annotations

import json
import posixpath
from collections.abc import Mapping
from typing import Any

from etl.core import dead_letters
from etl.core.atomic_files import write_text_atomically
from reader import contract

DEFAULT_MAX_ERROR_FRACTION = 0.1
# Written instead of the manifest when a check withholds the dataset, so the launcher
# (and a user looking at the output directory) learns why, whatever the runner.
FAILURE_FILENAME = "failure.json"


class WithheldError(RuntimeError):
    """The job ran, but a check refused to publish its dataset (no manifest)."""


class ReconciliationError(WithheldError):
    """Inputs ≠ written + rejected: something was dropped or duplicated silently."""


class TooManyRejectionsError(WithheldError):
    """The rejected fraction exceeds ``--max_error_fraction``."""


class EmptyTrainSplitError(WithheldError, ValueError):
    """The job produced no train examples."""


_WITHHELD_ERRORS = {cls.__name__: cls for cls in (
    ReconciliationError, TooManyRejectionsError, EmptyTrainSplitError)}


def failure_path(output_dir: str) -> str:
    return posixpath.join(output_dir, contract.ERRORS_DIRNAME, FAILURE_FILENAME)


def write_failure(output_dir: str, error: WithheldError) -> None:
    """Records why the dataset was withheld: ``errors/failure.json``."""
    write_text_atomically(failure_path(output_dir), json.dumps(
        {"error": type(error).__name__, "message": str(error)}, sort_keys=True) + "\n")


def read_failure(output_dir: str) -> WithheldError | None:
    """The error :func:`write_failure` recorded in ``output_dir``, rebuilt with its
    type, or None if the dataset was not withheld by a check."""
    import tensorflow as tf

    path = failure_path(output_dir)
    if not tf.io.gfile.exists(path):
        return None
    with tf.io.gfile.GFile(path, "r") as f:
        record = json.loads(f.read())
    return _WITHHELD_ERRORS.get(record["error"], WithheldError)(record["message"])


def _written(manifest: Mapping[str, Any]) -> int:
    return sum(manifest["splits"][split]["num_records"] for split in contract.SPLITS)


def _check_fraction(rejected: int, inputs: int, max_error_fraction: float,
                    manifest: Mapping[str, Any], unit: str) -> None:
    if inputs and rejected / inputs > max_error_fraction:
        by_reason = manifest["rejected"]["by_reason"]
        top = sorted(by_reason.items(), key=lambda kv: (-kv[1], kv[0]))[:3]
        examples = manifest["rejected"].get("examples", {})
        details = "; ".join(
            f"{reason} x{count} (e.g. {', '.join(e['key'] for e in examples.get(reason, []))})"
            for reason, count in top)
        raise TooManyRejectionsError(
            f"{rejected} of {inputs} {unit} ({rejected / inputs:.1%}) were rejected, above "
            f"--max_error_fraction={max_error_fraction}. Top reasons: {details}. See "
            f"{contract.ERRORS_DIRNAME}/{contract.REJECTED_FILENAME}; no manifest was "
            f"published.")


# Why an image dataset's train split can be empty.
IMAGES_EMPTY_TRAIN = (
    "tf.Transform's analyzers (the label vocabulary) had nothing to fit on. Check the "
    "split folders / split column of the input, or --split_fractions")


def check_train_split(manifest: Mapping[str, Any], why: str) -> None:
    """Raises ``EmptyTrainSplitError`` (its message ending in ``why``) when the train
    split holds no record."""
    if not manifest["splits"][contract.TRAIN]["num_records"]:
        raise EmptyTrainSplitError(f"The train split is empty: {why}. No manifest was "
                                   f"published.")


def check_images(manifest: Mapping[str, Any], max_error_fraction: float) -> None:
    """Images: every listed input is written or rejected, exactly once.

    Raises:
        ReconciliationError: if ``inputs != written + rejected``.
        TooManyRejectionsError: if ``rejected / inputs > max_error_fraction``.
        EmptyTrainSplitError: if no image was written to the train split.
    """
    inputs, rejected = manifest["inputs"], manifest["rejected"]["count"]
    written = _written(manifest)
    if written + rejected != inputs:
        raise ReconciliationError(
            f"{inputs} inputs but {written} written + {rejected} rejected = "
            f"{written + rejected}: an input was lost or duplicated. No manifest was "
            f"published.")
    _check_fraction(rejected, inputs, max_error_fraction, manifest, "inputs")
    check_train_split(manifest, IMAGES_EMPTY_TRAIN)


def check_timeseries(manifest: Mapping[str, Any], max_error_fraction: float) -> None:
    """Time series: every input row is parsed or rejected, and every parsed row is
    kept, merged, dropped by the missing-value policy, or rejected.

    Rows rejected with their whole series (too short, unlabelled, inconsistent
    timestamps) count as rejected rows for the threshold. Every window cut is written
    or rejected (``window_out_of_range``).

    Raises:
        ReconciliationError: if an identity fails.
        TooManyRejectionsError: if rejected rows / input rows > max_error_fraction.
        EmptyTrainSplitError: if no train window was written, saying why.
    """
    counts = manifest["timeseries"]["counts"]
    rows_read = counts.get("rows_read", 0)
    lines, parse_rejected = manifest["inputs"], manifest["timeseries"]["parse_rejected"]
    if rows_read + parse_rejected != lines:
        raise ReconciliationError(
            f"{lines} input rows but {rows_read} parsed + {parse_rejected} rejected while "
            f"parsing. No manifest was published.")
    outcome = sum(counts.get(k, 0) for k in ("rows_kept", "rows_rejected",
                                             "rows_dropped_missing",
                                             "rows_merged_duplicates"))
    if outcome != rows_read:
        raise ReconciliationError(
            f"{rows_read} parsed rows but kept + rejected + dropped + merged = {outcome}. "
            f"No manifest was published.")
    windows = sum(counts.get(f"windows_{split}", 0) for split in contract.SPLITS)
    out_of_range = manifest["rejected"]["by_reason"].get(dead_letters.WINDOW_OUT_OF_RANGE, 0)
    if windows != _written(manifest) + out_of_range:
        raise ReconciliationError(
            f"{windows} windows cut but {_written(manifest)} written + {out_of_range} "
            f"rejected ({dead_letters.WINDOW_OUT_OF_RANGE}). No manifest was published.")
    rejected_rows = (parse_rejected + counts.get("rows_rejected", 0)
                     + counts.get("rows_in_short_series", 0))
    _check_fraction(rejected_rows, lines, max_error_fraction, manifest, "rows")
    if not lines:
        why = "the input has no data rows (a header only, or empty files)"
    elif not rows_read:
        why = (f"no row of the input could be parsed (see {contract.ERRORS_DIRNAME}/"
               f"{contract.REJECTED_FILENAME})")
    else:
        reason = manifest["timeseries"].get("empty_splits", {}).get(contract.TRAIN)
        why = f"no train window, {reason}" if reason else "no train window was written"
    check_train_split(manifest, why)
