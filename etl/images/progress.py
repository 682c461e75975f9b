"""The image shard step's progress lines: shards done, kept, images written, ETA."""

from __future__ import annotations

import os
import sys
import threading
import time

# Prints a progress line to stderr after each shard unless set to "0".
PROGRESS_ENV = "ETL_PROGRESS"


class _Progress:
    """Per-process progress of the shard step, printed to stderr as shards finish."""

    _lock = threading.Lock()
    _started: float | None = None
    _shards = 0
    _kept = 0
    _images = 0

    @classmethod
    def start(cls) -> None:
        with cls._lock:
            if cls._started is None:
                cls._started = time.monotonic()

    @classmethod
    def shard_done(cls, images: int, total_shards: int, split: str, kept: bool) -> None:
        if os.environ.get(PROGRESS_ENV, "1") == "0":
            return
        cls.start()
        with cls._lock:
            cls._shards += 1
            cls._kept += kept
            cls._images += 0 if kept else images
            elapsed = max(1e-9, time.monotonic() - (cls._started or time.monotonic()))
            done, kept_so_far, written = cls._shards, cls._kept, cls._images
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


def start() -> None:
    """Starts this process's clock at its first shard."""
    _Progress.start()


def shard_done(images: int, total_shards: int, split: str, kept: bool) -> None:
    """Prints the progress line of a shard written (or kept from the interrupted run)."""
    _Progress.shard_done(images, total_shards, split, kept)
