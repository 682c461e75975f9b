"""Importing TensorFlow without its C++ start-up lines, at the user's log level.

TensorFlow 2.21 logs oneDNN notes, CUDA probes and absl's "before InitializeLog"
warning from its shared libraries as they load and as devices are first listed:
before absl's logging is configured, so ``TF_CPP_MIN_LOG_LEVEL`` does not filter
them (at any level). The jobs hold that window's stderr (file descriptor 2, C++ code's
too), then restore it. Without a user's ``TF_CPP_MIN_LOG_LEVEL`` nothing of the window
is shown and the level is set to 2 (``reader.quiet``: notes and warnings hidden,
errors shown) for this process and the workers it starts. With one, the user's value
wins: it stays as set, and the window's lines are filtered by it as TensorFlow filters
later ones (0 shows all, 1 hides notes, 2 warnings too, 3 errors too).
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import tempfile
from collections.abc import Iterator

from reader import quiet

LOG_LEVEL_ENV = quiet.LOG_LEVEL_ENV
# A C++ log line's severity letter (absl: "I0000 00:00:1796559248.908952    7467
# port.cc:153] ...") or absl's own warning before them; other lines continue the last.
_SEVERITY = re.compile(r"^([IWEF])\d{4} [\d:.]+ +\d+ [^\]]*\] |^(WARNING): ")
_LEVEL_OF = {"I": 0, "W": 1, "WARNING": 1, "E": 2, "F": 3}


@contextlib.contextmanager
def stderr_silenced() -> Iterator[None]:
    """Points file descriptor 2 (C and C++ code's stderr too) at /dev/null."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "wb") as devnull:
            os.dup2(devnull.fileno(), 2)
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)


@contextlib.contextmanager
def stderr_captured() -> Iterator[list[str]]:
    """Holds what is written to file descriptor 2 (C and C++ code's stderr too); the
    yielded list holds it, as text, once the block ends."""
    sys.stderr.flush()
    saved = os.dup(2)
    held: list[str] = []
    with tempfile.TemporaryFile() as spool:
        try:
            os.dup2(spool.fileno(), 2)
            yield held
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            spool.seek(0)
            held.append(spool.read().decode("utf-8", "replace"))


def lines_at_level(text: str, level: int) -> str:
    """The log lines of ``text`` that ``TF_CPP_MIN_LOG_LEVEL=level`` lets through: those
    of at least that severity, with their continuation lines; lines before any log line
    (not TensorFlow's) are kept."""
    kept, keep = [], True
    for line in text.splitlines(keepends=True):
        match = _SEVERITY.match(line)
        if match:
            keep = _LEVEL_OF[match.group(1) or match.group(2)] >= level
        if keep:
            kept.append(line)
    return "".join(kept)


def _user_level(value: str) -> int:
    # TensorFlow reads a value that is not a number as 0 (everything shown).
    try:
        return int(value)
    except ValueError:
        return 0


def import_tensorflow_quietly() -> None:
    """Imports TensorFlow and lists its devices with the start-up lines hidden, or,
    where the user set ``TF_CPP_MIN_LOG_LEVEL``, filtered by their level; a no-op once
    TensorFlow is imported."""
    if "tensorflow" in sys.modules:
        return
    quiet.quiet_tensorflow_logs()
    if quiet.USER_LEVEL is None:
        with stderr_silenced():
            _start_tensorflow()
        return
    with stderr_captured() as held:
        _start_tensorflow()
    sys.stderr.write(lines_at_level("".join(held), _user_level(quiet.USER_LEVEL)))
    sys.stderr.flush()


def _start_tensorflow() -> None:
    import tensorflow as tf

    tf.config.list_physical_devices()
