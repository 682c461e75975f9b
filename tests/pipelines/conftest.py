"""Fixtures of the job tests."""

from __future__ import annotations

import pytest

from tests.job_runs import restored_console


@pytest.fixture()
def root_logging():
    """Restores the root logger's level and handler filters, ``sys.stderr`` and
    ``threading.excepthook``, which ``common.main`` sets."""
    with restored_console():
        yield
