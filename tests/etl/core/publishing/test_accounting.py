"""Unit tests of etl/core/publishing/accounting.py: the shared checks and errors/failure.json."""

from __future__ import annotations

import pytest

from etl.core.publishing import accounting
from reader.format import contract


def _manifest(train: int, test: int = 0, by_reason: dict[str, int] | None = None) -> dict:
    return {
        "splits": {"train": {"num_records": train}, "validation": {"num_records": 0},
                   "test": {"num_records": test}},
        "rejected": {"by_reason": by_reason or {},
                     "examples": {"empty_file": [{"key": "a"}, {"key": "b"}]}},
    }


@pytest.mark.parametrize("error", [
    accounting.ReconciliationError("1 input lost"),
    accounting.TooManyRejectionsError("3 of 4 inputs"),
    accounting.EmptyTrainSplitError("no train"),
])
def test_read_failure_rebuilds_the_recorded_error_with_its_type(tmp_path, error):
    accounting.write_failure(str(tmp_path), error)
    read = accounting.read_failure(str(tmp_path))
    assert (type(read), str(read)) == (type(error), str(error))


def test_write_failure_records_the_errors_code_and_message(tmp_path):
    accounting.write_failure(str(tmp_path), accounting.ReconciliationError("lost"))
    path = tmp_path / contract.ERRORS_DIRNAME / accounting.FAILURE_FILENAME
    assert path.read_text() == '{"error": "ReconciliationError", "message": "lost"}\n'


def test_read_failure_is_none_when_nothing_was_withheld(tmp_path):
    assert accounting.read_failure(str(tmp_path)) is None


def test_written_records_sums_every_split():
    assert accounting.written_records(_manifest(train=5, test=2)) == 7


def test_check_fraction_names_the_top_reasons_above_the_threshold():
    manifest = _manifest(train=1, by_reason={"empty_file": 2})
    with pytest.raises(accounting.TooManyRejectionsError,
                       match=r"^2 of 10 inputs \(20\.0%\) were rejected, above "
                             r"--max_error_fraction=0\.1\. Top reasons: empty_file x2 "
                             r"\(e\.g\. a, b\)\."):
        accounting.check_fraction(2, 10, 0.1, manifest, "inputs")


def test_check_fraction_accepts_the_threshold_itself():
    assert accounting.check_fraction(1, 10, 0.1, _manifest(train=1), "inputs") is None


def test_check_train_split_ends_its_message_with_the_reason():
    with pytest.raises(accounting.EmptyTrainSplitError,
                       match=r"^The train split is empty: because\. No manifest was "
                             r"published\.$"):
        accounting.check_train_split(_manifest(train=0, test=3), "because")
