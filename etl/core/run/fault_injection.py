"""Test-only faults: points where a job freezes, to kill it exactly there; a full disk.

``ETL_PAUSE_AT=<point>`` makes the process stop itself (SIGSTOP) on reaching that
point, ``ETL_PAUSE_AT=<point>:<n>`` on reaching it for the n-th time in this process;
the kill -9 tests then check which unfinished files exist, SIGKILL it, and check
what the next run keeps and that it publishes the same dataset. Unset (always,
outside those tests), a point costs one environment lookup.

``ETL_FAIL_WRITES_AFTER_BYTES=<n>`` makes shard writes fail as on a full disk
(``OSError`` ENOSPC, naming the file) once this process has written more than ``n``
bytes of records (``check_write_budget``): how a test fills the output's disk
without mounting one. Read once, when this module is imported.
"""

from __future__ import annotations

import collections
import errno
import os
import signal
import threading

PAUSE_ENV = "ETL_PAUSE_AT"
# While the first record of a shard is written to its temporary file.
SHARD_WRITING = "shard_writing"
# After a shard's file got its pending name, before the finalize step renames it.
SHARD_WRITTEN = "shard_written"
# After a written shard's record (etl/core/run/resume.py) is on disk.
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


WRITE_BUDGET_ENV = "ETL_FAIL_WRITES_AFTER_BYTES"
_write_budget = (int(os.environ[WRITE_BUDGET_ENV]) if os.environ.get(WRITE_BUDGET_ENV)
                 else None)
_written_bytes = 0


def check_write_budget(nbytes: int, path: str) -> None:
    """Raises ``OSError(ENOSPC)`` for ``path`` if writing ``nbytes`` more takes this
    process past ``ETL_FAIL_WRITES_AFTER_BYTES``; else (always, outside those tests)
    does nothing."""
    global _written_bytes
    if _write_budget is None:
        return
    with _lock:
        _written_bytes += nbytes
        full = _written_bytes > _write_budget
    if full:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), path)
