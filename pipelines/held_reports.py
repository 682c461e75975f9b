"""What reports a failure while a job runs, held back until the run ends.

Beam logs a failing step's traceback before re-raising it (and forwards each
worker's), its SDK harness prints a failed bundle's traceback to ``sys.stderr``, and
every thread that loses a killed worker reports its own error. The console entry
(``common.main``) holds these back while the job runs::

    held = HeldReports()
    handler.addFilter(held.filter_for(handler))
    held.hold_thread_errors_and_stderr()
    ...  # run the job
    held.drop()  # it stopped on a recognised failure: its one line says it all
    held.release()  # otherwise: print what was held, in the order it came
"""

from __future__ import annotations

import enum
import logging
import sys
import threading
from collections.abc import Callable
from typing import TextIO

from pipelines.failures import error_texts, reports_failure


class _State(enum.Enum):
    HOLDING = "holding"
    DROPPING = "dropping"
    PASSING = "passing"


_TRACEBACK_START = "Traceback (most recent call last):"


class HeldReports:
    """Holds back, while a job runs, what reports a resource failure or a lost worker
    (``reports_failure``): log records, uncaught thread errors, and the tracebacks
    Beam's SDK harness prints to ``sys.stderr`` itself (in this process with
    ``--environment_type=LOOPBACK``). Everything else passes at once.

    ``drop()``, when the run ended in a recognised failure, discards them and keeps
    discarding later ones (threads still winding down would print after the last
    line); ``release()`` replays them in the order they came, and lets all pass.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._state = _State.HOLDING
        self._held: list[tuple[str, Callable[[], object]]] = []  # (text, replay)
        self._previous_hook = threading.excepthook
        self._previous_stderr = sys.stderr

    def filter_for(self, handler: logging.Handler) -> logging.Filter:
        """A filter to add to ``handler``."""
        reports = self

        class _Hold(logging.Filter):
            def filter(self, record: logging.LogRecord) -> bool:
                return not reports._holds_record(handler, record)

        return _Hold()

    def hold_thread_errors_and_stderr(self) -> None:
        """Routes uncaught thread errors and ``sys.stderr`` through this object."""
        threading.excepthook = self._thread_error
        sys.stderr = _HeldStream(self, self._previous_stderr)

    def _hold(self, text: str, replay: Callable[[], object]) -> bool:
        """Holds ``replay`` unless everything passes; True if it is not to pass now."""
        with self._lock:
            if self._state is _State.HOLDING:
                self._held.append((text, replay))
            return self._state is not _State.PASSING

    def _holds_record(self, handler: logging.Handler, record: logging.LogRecord) -> bool:
        if self._state is _State.PASSING:
            return False
        error = record.exc_info[1] if record.exc_info else None
        message = record.getMessage()
        if not reports_failure(error, message):
            return False
        texts = [message, *(error_texts(error) if error is not None else [])]
        return self._hold("\n".join(texts), lambda: handler.handle(record))

    def _thread_error(self, args: threading.ExceptHookArgs) -> None:
        error = args.exc_value
        held = (self._state is not _State.PASSING and error is not None
                and reports_failure(error)
                and self._hold("\n".join(error_texts(error)),
                               lambda: self._previous_hook(args)))
        if not held:
            self._previous_hook(args)

    def _holds_text(self, text: str, stream: TextIO) -> bool:
        if self._state is _State.PASSING or not text.startswith(_TRACEBACK_START):
            return False
        if not reports_failure(None, text):
            return False
        return self._hold(text, lambda: stream.write(text))

    def texts(self) -> list[str]:
        """The held reports as text (messages, each exception's type and text)."""
        with self._lock:
            return [text for text, _ in self._held if text]

    def drop(self) -> None:
        """Discards the held reports, and any later one of the same kind."""
        with self._lock:
            self._state = _State.DROPPING
            self._held = []

    def release(self) -> None:
        """Replays the held reports in the order they came; lets everything pass."""
        with self._lock:
            self._state = _State.PASSING
            held, self._held = self._held, []
        threading.excepthook = self._previous_hook
        if isinstance(sys.stderr, _HeldStream):
            sys.stderr = self._previous_stderr
        for _, replay in held:
            replay()


class _HeldStream:
    """``sys.stderr`` while a job runs: a traceback ``HeldReports`` holds is not
    written, nor the newline ``print`` writes after it."""

    def __init__(self, reports: HeldReports, stream: TextIO) -> None:
        self._reports = reports
        self._stream = stream
        self._after_held = False

    def write(self, text: str) -> int:
        after_held, self._after_held = self._after_held, False
        stream = self._stream
        if after_held and text == "\n" and self._reports._hold("", lambda: stream.write(text)):
            return len(text)
        if self._reports._holds_text(text, stream):
            self._after_held = True
            return len(text)
        return self._stream.write(text)

    def __getattr__(self, name: str) -> object:
        return getattr(self._stream, name)
