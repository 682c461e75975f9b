"""The image shard step's progress lines: shards done, kept, images written, ETA.

Counted per process and per run: a process that runs the job twice (a notebook, a
test, a rerun in-process) starts each run's count at zero.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import threading
import time

# Prints a progress line to stderr after each shard unless set to "0".
PROGRESS_ENV = "ETL_PROGRESS"


@dataclasses.dataclass
class _Counts:
    started: float
    shards: int = 0
    kept: int = 0
    images: int = 0


_lock = threading.Lock()
_runs: dict[str, _Counts] = {}


def _counts(run: str) -> _Counts:
    """This process's counts of ``run`` (created at its first shard); call locked."""
    if run not in _runs:
        _runs[run] = _Counts(started=time.monotonic())
    return _runs[run]


def start(run: str) -> None:
    """Starts this process's clock for ``run`` at its first shard."""
    with _lock:
        _counts(run)


def shard_done(run: str, images: int, total_shards: int, split: str, kept: bool) -> None:
    """Prints the progress line of a shard of ``run`` written (or ``kept`` from the
    interrupted run it resumes)."""
    if os.environ.get(PROGRESS_ENV, "1") == "0":
        return
    with _lock:
        counts = _counts(run)
        counts.shards += 1
        counts.kept += kept
        counts.images += 0 if kept else images
        elapsed = max(1e-9, time.monotonic() - counts.started)
        done, kept_so_far, written = counts.shards, counts.kept, counts.images
    rate = written / elapsed
    remaining = max(0, total_shards - done)
    eta = elapsed / max(1, done - kept_so_far) * remaining
    kept_part = f", {kept_so_far} kept from the interrupted run" if kept_so_far else ""
    print(f"[images] {done}/{total_shards} shards done ({split}{kept_part}); "
          f"{written} images written at {rate:.0f} images/s; ETA {_duration(eta)}",
          file=sys.stderr, flush=True)


def _duration(seconds: float) -> str:
    minutes, secs = divmod(round(seconds), 60)
    return f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"
