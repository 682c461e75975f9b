"""Every input row and window accounted for: the time-series job's check of its manifest."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from etl.core import dead_letters
from etl.core.publishing import accounting
from etl.core.publishing.accounting import ReconciliationError
from reader.format import contract


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
    written = accounting.written_records(manifest)
    if windows != written + out_of_range:
        raise ReconciliationError(
            f"{windows} windows cut but {written} written + {out_of_range} "
            f"rejected ({dead_letters.WINDOW_OUT_OF_RANGE}). No manifest was published.")
    rejected_rows = (parse_rejected + counts.get("rows_rejected", 0)
                     + counts.get("rows_in_short_series", 0))
    accounting.check_fraction(rejected_rows, lines, max_error_fraction, manifest, "rows")
    if not lines:
        why = "the input has no data rows (a header only, or empty files)"
    elif not rows_read:
        why = (f"no row of the input could be parsed (see {contract.ERRORS_DIRNAME}/"
               f"{contract.REJECTED_FILENAME})")
    else:
        reason = manifest["timeseries"].get("empty_splits", {}).get(contract.TRAIN)
        why = f"no train window, {reason}" if reason else "no train window was written"
    accounting.check_train_split(manifest, why)
