"""Named points where a test can freeze a job, to kill it exactly there.

``ETL_PAUSE_AT=<point>`` makes the process stop itself (SIGSTOP) on reaching that
point; the kill -9 tests then check which unfinished files exist, SIGKILL it, and
check that the next run clears them and publishes the same dataset. Unset (always,
outside those tests), a point costs one environment lookup.
"""

from __future__ import annotations

import os
import signal

PAUSE_ENV = "ETL_PAUSE_AT"
# While the first record of a shard is written to its temporary file.
SHARD_WRITING = "shard_writing"
# After a shard's file got its pending name, before the finalize step renames it.
SHARD_WRITTEN = "shard_written"
# After every shard has its final name, just before manifest.json is written.
MANIFEST_WRITING = "manifest_writing"


def pause_point(name: str) -> None:
    """Stops this process if ``ETL_PAUSE_AT`` names ``name``; else does nothing."""
    if os.environ.get(PAUSE_ENV) == name:
        os.kill(os.getpid(), signal.SIGSTOP)
