"""etl/core/cores.py: the cores a process may run on."""

from __future__ import annotations

import os

from etl.core import cores


def test_usable_is_the_processs_affinity_not_the_machines_count():
    allowed = os.sched_getaffinity(0)
    try:
        os.sched_setaffinity(0, {min(allowed)})
        assert cores.usable() == 1
    finally:
        os.sched_setaffinity(0, allowed)
    assert cores.usable() == len(allowed)


def test_usable_falls_back_to_the_machines_count_without_affinity(monkeypatch):
    monkeypatch.delattr(os, "sched_getaffinity")
    monkeypatch.setattr(os, "cpu_count", lambda: 6)
    assert cores.usable() == 6
    monkeypatch.setattr(os, "cpu_count", lambda: None)
    assert cores.usable() == 1
