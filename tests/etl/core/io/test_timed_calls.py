"""Unit tests of etl/core/io/timed_calls.py: a call given a time limit returns or raises
as it would, or is given up at the limit and left to a daemon thread."""

from __future__ import annotations

import threading
import time

import pytest

from etl.core.io import timed_calls


def _helpers() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.name == "TimedCall"}


def test_within_returns_or_raises_what_the_call_does():
    assert timed_calls.within(10, lambda: b"bytes", "Reading") == b"bytes"
    with pytest.raises(FileNotFoundError, match="absent"):
        timed_calls.within(10, lambda: open("/absent/file"), "Opening")


def test_calls_in_turn_reuse_one_waiting_helper():
    timed_calls.within(10, lambda: 1, "Warming")
    before = _helpers()
    assert [timed_calls.within(10, lambda i=i: i, "Counting") for i in range(20)] == list(
        range(20))
    assert _helpers() == before


def test_a_call_past_its_limit_is_given_up_and_its_daemon_ends_when_it_returns():
    released = threading.Event()
    started = time.monotonic()
    with pytest.raises(timed_calls.TimedOut,
                       match=r"^Waiting did not finish within 0\.1 s: given up$"):
        timed_calls.within(0.1, released.wait, "Waiting")
    assert time.monotonic() - started < 2
    # The one helper not waiting for a call is left to this one: a daemon.
    [stalled] = [t for t in _helpers() if t not in timed_calls._idle]
    assert stalled.daemon
    released.set()
    stalled.join(timeout=5)
    assert not stalled.is_alive()
    assert timed_calls.within(10, lambda: "next", "Calling") == "next"
