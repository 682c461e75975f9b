"""How many cores this process may run on: the one count the jobs' thread pools and
the end-of-job summary use."""

from __future__ import annotations

import os


def usable() -> int:
    """The CPUs this process may run on: its affinity where the OS has one (Linux: a
    container's or ``taskset``'s limit, not the machine's count), else the machine's."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1
