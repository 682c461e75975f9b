"""Temp-name-then-rename writes: a reader never sees a half-written file."""

from __future__ import annotations

import contextlib
import posixpath
from collections.abc import Iterator

# Suffix of every file still being written; a run's leftovers carry it.
INCOMPLETE_SUFFIX = ".incomplete"


def temp_path_for(path: str) -> str:
    """Where ``path`` is written before it is complete."""
    return path + INCOMPLETE_SUFFIX


def publish(tmp_path: str, path: str) -> None:
    """Renames a complete temporary file to its final ``path`` (replacing it)."""
    import tensorflow as tf

    tf.io.gfile.rename(tmp_path, path, overwrite=True)


@contextlib.contextmanager
def atomic_path(path: str) -> Iterator[str]:
    """Yields a temporary path beside ``path``; renames it to ``path`` on success.

    The caller writes the temporary path however it likes (``tf.io.TFRecordWriter``,
    ``GFile``). If the block raises, the temporary file is removed and ``path`` is
    left as it was. Works on every ``tf.io.gfile`` filesystem (local, gs://, ...).
    """
    import tensorflow as tf

    tmp_path = temp_path_for(path)
    tf.io.gfile.makedirs(posixpath.dirname(path) or ".")
    try:
        yield tmp_path
    except BaseException:
        if tf.io.gfile.exists(tmp_path):
            tf.io.gfile.remove(tmp_path)
        raise
    publish(tmp_path, path)


def write_text_atomically(path: str, text: str) -> None:
    """Writes ``text`` (UTF-8) to ``path`` through :func:`atomic_path`."""
    import tensorflow as tf

    with atomic_path(path) as tmp_path, tf.io.gfile.GFile(tmp_path, "w") as f:
        f.write(text)
