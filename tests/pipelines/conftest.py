"""Fixtures of the job tests."""

from __future__ import annotations

import logging

import pytest


@pytest.fixture()
def root_logging(monkeypatch):
    """Restores the root logger's level and handler filters that ``common.main`` sets."""
    root = logging.getLogger()
    monkeypatch.setattr(root, "level", root.level)
    for handler in root.handlers:
        monkeypatch.setattr(handler, "filters", list(handler.filters))
