"""Fixtures of the job tests."""

from __future__ import annotations

import logging
import sys
import threading

import pytest


@pytest.fixture()
def root_logging(monkeypatch):
    """Restores the root logger's level and handler filters, ``sys.stderr`` and
    ``threading.excepthook``, which ``common.main`` sets."""
    monkeypatch.setattr(sys, "stderr", sys.stderr)
    monkeypatch.setattr(threading, "excepthook", threading.excepthook)
    root = logging.getLogger()
    monkeypatch.setattr(root, "level", root.level)
    for handler in root.handlers:
        monkeypatch.setattr(handler, "filters", list(handler.filters))
