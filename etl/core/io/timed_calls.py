"""Calls given a time limit: a blocking call (a read on a stalled mount) that the
caller stops waiting for, without holding up the job or the process's exit.

A call that blocks in the kernel cannot be interrupted from Python, so it runs on a
helper thread and the caller waits for it at most ``timeout_s``. Helper threads are
daemons kept waiting for the next call (a handoff, not a thread start, per call); one
whose call outlives its limit is left to it and ends if the call ever returns.
Daemon threads are not joined at exit, as a thread pool's are.

Example:
    >>> within(5.0, lambda: 42, "Answering")
    42
"""

from __future__ import annotations

import os
import queue
import threading
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


class TimedOut(TimeoutError):
    """A call that did not finish within its time limit; it was given up."""


class _Helper(threading.Thread):
    """Runs the calls handed to it, one at a time."""

    def __init__(self) -> None:
        super().__init__(name="TimedCall", daemon=True)
        self.calls: queue.SimpleQueue[Callable[[], Any] | None] = queue.SimpleQueue()
        self.results: queue.SimpleQueue[tuple[Any, Exception | None]] = queue.SimpleQueue()
        self.start()

    def run(self) -> None:
        while (call := self.calls.get()) is not None:
            try:
                self.results.put((call(), None))
            except Exception as e:  # Raised again by the caller.
                self.results.put((None, e))


# Helpers waiting for a call (list.pop and append are atomic). A forked child has
# none of its parent's threads.
_idle: list[_Helper] = []
os.register_at_fork(after_in_child=_idle.clear)


def within(timeout_s: float, call: Callable[[], T], what: str) -> T:
    """``call()``'s result, or what it raised, if it finishes within ``timeout_s``.

    Raises:
        TimedOut: ``"<what> did not finish within <timeout_s> s: given up"``, once
            ``timeout_s`` has passed; the call goes on, on its own thread.
    """
    try:
        helper = _idle.pop()
    except IndexError:
        helper = _Helper()
    helper.calls.put(call)
    try:
        result, error = helper.results.get(timeout=timeout_s)
    except queue.Empty:
        helper.calls.put(None)  # It ends once (if ever) the call returns.
        raise TimedOut(f"{what} did not finish within {timeout_s:g} s: given up") from None
    _idle.append(helper)
    if error is not None:
        raise error
    return result

