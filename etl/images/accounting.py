"""Every listed image accounted for: the image job's check of its manifest."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from etl.core import dead_letters
from etl.core.publishing import accounting
from etl.core.publishing.accounting import ReconciliationError

# Why an image dataset's train split can be empty.
EMPTY_TRAIN = (
    "tf.Transform's analyzers (the label vocabulary) had nothing to fit on. Check the "
    "split folders / split column of the input, or --split_fractions")


def check_images(manifest: Mapping[str, Any], max_error_fraction: float) -> None:
    """Images: every listed input is written or rejected, exactly once.

    Raises:
        ReconciliationError: if ``inputs != written + rejected``.
        TooManyRejectionsError: if ``rejected / inputs > max_error_fraction``, not
            counting the duplicates ``--cross_split_duplicates=drop`` removed.
        EmptyTrainSplitError: if no image was written to the train split.
    """
    inputs, rejected = manifest["inputs"], manifest["rejected"]["count"]
    written = accounting.written_records(manifest)
    if written + rejected != inputs:
        raise ReconciliationError(
            f"{inputs} inputs but {written} written + {rejected} rejected = "
            f"{written + rejected}: an input was lost or duplicated. No manifest was "
            f"published.")
    # Duplicates --cross_split_duplicates=drop removed are the user's choice, not errors.
    removed = manifest["rejected"]["by_reason"].get(dead_letters.CROSS_SPLIT_DUPLICATE, 0)
    accounting.check_fraction(rejected - removed, inputs, max_error_fraction, manifest,
                              "inputs")
    accounting.check_train_split(manifest, EMPTY_TRAIN)
