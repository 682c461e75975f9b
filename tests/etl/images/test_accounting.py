"""Unit tests of etl/images/accounting.py: the image job's check of its manifest."""

from __future__ import annotations

import pytest

from etl.core.publishing import accounting
from etl.images.accounting import check_images


def _manifest(inputs: int, train: int, test: int, rejected: int) -> dict:
    return {
        "inputs": inputs,
        "splits": {"train": {"num_records": train}, "validation": {"num_records": 0},
                   "test": {"num_records": test}},
        "rejected": {"count": rejected, "by_reason": {"empty_file": rejected},
                     "examples": {"empty_file": [{"key": "x"}]}},
    }


def test_check_images_accepts_inputs_written_or_rejected_once():
    assert check_images(_manifest(inputs=10, train=6, test=3, rejected=1), 0.1) is None


def test_check_images_refuses_counts_that_do_not_reconcile():
    with pytest.raises(accounting.ReconciliationError,
                       match=r"^10 inputs but 6 written \+ 1 rejected = 7: an input was "
                             r"lost or duplicated\."):
        check_images(_manifest(inputs=10, train=6, test=0, rejected=1), 0.5)


def test_check_images_refuses_too_many_rejections():
    with pytest.raises(accounting.TooManyRejectionsError, match=r"^2 of 10 inputs"):
        check_images(_manifest(inputs=10, train=6, test=2, rejected=2), 0.1)


def test_check_images_refuses_an_empty_train_split_naming_the_split_options():
    with pytest.raises(accounting.EmptyTrainSplitError,
                       match=r"Check the split folders / split column of the input, or "
                             r"--split_fractions\. No manifest was published\.$"):
        check_images(_manifest(inputs=4, train=0, test=4, rejected=0), 0.1)
