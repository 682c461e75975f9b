"""Importing TensorFlow without its C++ start-up lines, unless the user asked for logs.

TensorFlow 2.21 logs oneDNN notes, CUDA probes and absl's "before InitializeLog"
warning from its shared libraries as they load and as devices are first listed:
before absl's logging is configured, so ``TF_CPP_MIN_LOG_LEVEL`` does not filter
them. The jobs hide exactly that window by pointing file descriptor 2 at /dev/null,
then restore it; later C++ messages obey ``TF_CPP_MIN_LOG_LEVEL``, which is set to 2
(warnings and errors hidden, fatal shown) for this process and the workers it starts.
A user who set ``TF_CPP_MIN_LOG_LEVEL`` themselves sees everything as they chose.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator

LOG_LEVEL_ENV = "TF_CPP_MIN_LOG_LEVEL"


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


def import_tensorflow_quietly() -> None:
    """Imports TensorFlow and lists its devices with the start-up lines hidden, unless
    the user set ``TF_CPP_MIN_LOG_LEVEL``; a no-op once TensorFlow is imported."""
    if LOG_LEVEL_ENV in os.environ or "tensorflow" in sys.modules:
        return
    os.environ[LOG_LEVEL_ENV] = "2"
    with stderr_silenced():
        import tensorflow as tf

        tf.config.list_physical_devices()
