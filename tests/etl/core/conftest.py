"""Fixtures of the shared blocks' tests."""

from __future__ import annotations

import pytest


@pytest.fixture(params=["local", "gcs"])
def root(request, tmp_path) -> str:
    """A folder on each filesystem: a local path, or a prefix of a fresh bucket."""
    if request.param == "local":
        return str(tmp_path / "root")
    bucket = request.getfixturevalue("gcs_bucket")
    return f"{bucket.url}/root"
