"""Files that two processes may race for (a run's lock): created only if absent,
replaced or deleted only if unchanged since read.

Beside ``etl.core.io.storage``, on which it builds: on a disk an atomic ``link(2)`` and a
rename aside; on GCS the preconditions ``ifGenerationMatch`` (``etl.core.io.gcs``). Other
object stores offer Beam no such request: there the check and the write are two
steps, and two processes racing may both succeed.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import uuid

from etl.core.io import gcs, storage


def _on_gcs(path: str) -> bool:
    if not path.startswith("gs://"):
        return False
    gcs.prepare()
    return True

@dataclasses.dataclass(frozen=True)
class Versioned:
    """A file's bytes and a token of the version they are of (on a disk its inode,
    size and mtime; on GCS its generation)."""

    data: bytes
    token: str


def _local_token(path: str) -> str:
    found = os.stat(path)
    return f"{found.st_ino}:{found.st_size}:{found.st_mtime_ns}"


def create_new(path: str, data: bytes) -> str | None:
    """Writes ``data`` to ``path`` only if nothing is there; returns the new file's
    token, None if a file was there. Of two processes racing, one gets None.

    Raises:
        OSError: if the file cannot be written.
    """
    if _on_gcs(path):
        generation = gcs.create_new(path, data)
        return None if generation is None else str(generation)
    if storage.is_remote(path):
        if storage.exists(path):
            return None
        storage.write_bytes(path, data)
        found = storage.stat(path)
        return None if found is None else f"{found.size}:{found.mtime}"
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    # Written aside, then linked to its name: link(2) fails if the name exists, and
    # the file appears whole (O_EXCL alone would show others an empty file at first).
    aside = _write_aside(path, data)
    try:
        os.link(aside, path)
    except FileExistsError:
        return None
    finally:
        os.remove(aside)
    return _local_token(path)


def _write_aside(path: str, data: bytes) -> str:
    """Writes ``data``, synced, to a new file beside ``path``; returns its path."""
    aside = f"{path}.{uuid.uuid4().hex}{storage.INCOMPLETE_SUFFIX}"
    with open(aside, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    return aside


def read_versioned(path: str) -> Versioned | None:
    """The file's bytes with their version's token; None if there is no file."""
    if _on_gcs(path):
        found = gcs.read_with_generation(path)
        return None if found is None else Versioned(found[0], str(found[1]))
    if storage.is_remote(path):
        info = storage.stat(path)
        if info is None:
            return None
        return Versioned(storage.read_bytes(path), f"{info.size}:{info.mtime}")
    try:
        token = _local_token(path)
        with open(path, "rb") as f:
            return Versioned(f.read(), token)
    except FileNotFoundError:
        return None


def replace_versioned(path: str, data: bytes, token: str) -> str | None:
    """Replaces the file at ``path`` with ``data`` if it is still the version
    ``token``; returns the new token, None if it changed or is gone."""
    if _on_gcs(path):
        generation = gcs.write_if_generation(path, data, int(token))
        return None if generation is None else str(generation)
    current = read_versioned(path)
    if current is None or current.token != token:
        return None
    if storage.is_remote(path):
        storage.write_bytes(path, data)
        found = storage.stat(path)
        return None if found is None else f"{found.size}:{found.mtime}"
    os.replace(_write_aside(path, data), path)
    return _local_token(path)


def delete_versioned(path: str, token: str) -> bool:
    """Deletes the file at ``path`` if it is still the version ``token``; False if it
    changed or is gone. On a disk the file is first renamed aside, which only one
    process can do, and put back if it turns out to be another version."""
    if _on_gcs(path):
        return gcs.delete_if_generation(path, int(token))
    if storage.is_remote(path):
        current = read_versioned(path)
        if current is None or current.token != token:
            return False
        storage.delete(path)
        return True
    aside = f"{path}.{uuid.uuid4().hex}.aside"
    try:
        os.rename(path, aside)
    except FileNotFoundError:
        return False
    if _local_token(aside) != token:
        with contextlib.suppress(FileExistsError):
            os.link(aside, path)
        os.remove(aside)
        return False
    os.remove(aside)
    return True
