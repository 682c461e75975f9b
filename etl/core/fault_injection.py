"""Named points where a test can freeze a job, to kill it exactly there.

``ETL_PAUSE_AT=<point>`` makes the process stop itself (SIGSTOP) on reaching that
point, ``ETL_PAUSE_AT=<point>:<n>`` on reaching it for the n-th time in this process;
the kill -9 tests then check which unfinished files exist, SIGKILL it, and check
what the next run keeps and that it publishes the same dataset. Unset (always,
outside those tests), a point costs one environment lookup.
"""

from __future__ import annotations

import collections
import os
import signal
import threading

PAUSE_ENV = "ETL_PAUSE_AT"
# While the first record of a shard is written to its temporary file.
SHARD_WRITING = "shard_writing"
# After a shard's file got its pending name, before the finalize step renames it.
SHARD_WRITTEN = "shard_written"
# After a written shard's record (etl/core/resume.py) is on disk.
SHARD_RECORDED = "shard_recorded"
# After every shard has its final name, just before manifest.json is written.
MANIFEST_WRITING = "manifest_writing"


_reached: collections.Counter[str] = collections.Counter()
_lock = threading.Lock()


def pause_point(name: str) -> None:
    """Stops this process if ``ETL_PAUSE_AT`` names ``name`` (and, with ``:<n>``, this
    is the n-th time this process reaches it); else does nothing."""
    wanted = os.environ.get(PAUSE_ENV)
    if wanted is None:
        return
    point, _, times = wanted.partition(":")
    if point != name:
        return
    with _lock:
        _reached[name] += 1
        reached = _reached[name]
    if not times or reached == int(times):
        os.kill(os.getpid(), signal.SIGSTOP)
