"""Every input accounted for: reconciliation and the error-fraction threshold.

A job's check runs on the finished manifest dict just before it is written, built
from these pieces (``etl.images.accounting``, ``etl.timeseries.accounting``). Raising
here means no manifest is published, so a dataset whose counts do not add up, or
with too many rejected inputs, never becomes visible to readers.
"""

from __future__ import annotations

import json
import posixpath
from collections.abc import Mapping
from typing import Any, ClassVar

from etl.core.io import storage
from reader.format import contract

DEFAULT_MAX_ERROR_FRACTION = 0.1
# Written instead of the manifest when a check withholds the dataset, so the launcher
# (and a user looking at the output directory) learns why, whatever the runner.
FAILURE_FILENAME = "failure.json"


class WithheldError(RuntimeError):
    """The job ran, but a check refused to publish its dataset (no manifest).

    ``code`` is the error's stable name in ``errors/failure.json`` (docs/FORMAT.md).
    """

    code: ClassVar[str] = "WithheldError"


class ReconciliationError(WithheldError):
    """Inputs ≠ written + rejected: something was dropped or duplicated silently."""

    code = "ReconciliationError"


class TooManyRejectionsError(WithheldError):
    """The rejected fraction exceeds ``--max_error_fraction``."""

    code = "TooManyRejectionsError"


class EmptyTrainSplitError(WithheldError, ValueError):
    """The job produced no train examples."""

    code = "EmptyTrainSplitError"


_WITHHELD_ERRORS = {cls.code: cls for cls in (
    WithheldError, ReconciliationError, TooManyRejectionsError, EmptyTrainSplitError)}


def failure_path(output_dir: str) -> str:
    return posixpath.join(output_dir, contract.ERRORS_DIRNAME, FAILURE_FILENAME)


def write_failure(output_dir: str, error: WithheldError) -> None:
    """Records why the dataset was withheld: ``errors/failure.json``."""
    storage.write_text(failure_path(output_dir), json.dumps(
        {"error": error.code, "message": str(error)}, sort_keys=True) + "\n")


def read_failure(output_dir: str) -> WithheldError | None:
    """The error :func:`write_failure` recorded in ``output_dir``, of the type its
    code names, or None if the dataset was not withheld by a check."""
    path = failure_path(output_dir)
    if not storage.exists(path):
        return None
    record = json.loads(storage.read_text(path))
    return _WITHHELD_ERRORS.get(record["error"], WithheldError)(record["message"])


def written_records(manifest: Mapping[str, Any]) -> int:
    """Examples written over every split of the manifest."""
    return sum(manifest["splits"][split]["num_records"] for split in contract.SPLITS)


def check_fraction(rejected: int, inputs: int, max_error_fraction: float,
                   manifest: Mapping[str, Any], unit: str) -> None:
    """Raises ``TooManyRejectionsError`` when ``rejected / inputs`` (``unit``: what
    was counted) exceeds ``max_error_fraction``, naming the top reasons."""
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


def check_train_split(manifest: Mapping[str, Any], why: str) -> None:
    """Raises ``EmptyTrainSplitError`` (its message ending in ``why``) when the train
    split holds no record."""
    if not manifest["splits"][contract.TRAIN]["num_records"]:
        raise EmptyTrainSplitError(f"The train split is empty: {why}. No manifest was "
                                   f"published.")
