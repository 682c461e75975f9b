"""Special files for the tests that no input blocks a job: a FIFO, a UNIX socket, and
a guard that frees whoever waits to open such a FIFO, so that a regression fails its
test instead of hanging the suite."""

from __future__ import annotations

import contextlib
import os
import socket
import threading
from collections.abc import Iterator, Sequence

# How long a test's code may take before the guard frees a reader blocked on a FIFO.
GRACE_S = 5.0


def make_fifo(path: str | os.PathLike) -> str:
    os.mkfifo(path)
    return str(path)


def make_socket(path: str | os.PathLike) -> str:
    """A UNIX socket file at ``path``: bound, then closed (the file stays). Bound
    from its folder: a socket's path is limited to about 107 bytes."""
    folder, name = os.path.split(os.path.abspath(path))
    cwd = os.getcwd()
    with socket.socket(socket.AF_UNIX) as bound:
        os.chdir(folder)
        try:
            bound.bind(name)
        finally:
            os.chdir(cwd)
    return str(path)


@contextlib.contextmanager
def freeing_blocked_readers(fifos: Sequence[str], after_s: float = GRACE_S
                            ) -> Iterator[list[str]]:
    """Runs the block; from ``after_s`` seconds on, a reader waiting to open one of
    ``fifos`` gets a writer that closes at once, so it reads an empty file and goes
    on. Yields the list of the FIFOs that had a reader waiting: empty if nothing
    blocked."""
    stop = threading.Event()
    freed: list[str] = []

    def watch() -> None:
        if stop.wait(after_s):
            return
        while not stop.is_set():
            for path in fifos:
                try:  # Opens only if a reader waits (else ENXIO), without blocking.
                    fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
                except OSError:
                    continue
                os.close(fd)
                freed.append(path)
            stop.wait(0.05)

    watcher = threading.Thread(target=watch, name="FreeBlockedReaders", daemon=True)
    watcher.start()
    try:
        yield freed
    finally:
        stop.set()
        watcher.join()
