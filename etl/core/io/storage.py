"""Every file a job reads or writes, on any filesystem Beam has: local, gs://, s3://, ...

The jobs' one seam to storage: listing inputs, reading their bytes, writing shards,
dead letters, key indexes, resume records and the manifest, and clearing leftovers
all go through here, built on Beam's ``FileSystems``, so a local folder and a bucket
prefix behave the same. Paths are local paths or URIs (``gs://bucket/a/b``), joined
with :func:`join`; the rest of the code never asks which kind it holds.

Object stores differ from a disk exactly where a dataset writer cares, and this
module is where the difference is handled:

* **No directories.** A folder is a prefix: it exists while an object lies under
  it, and listing is by prefix (recursive, sorted).
* **An object appears whole when its upload finishes**, and not at all if the
  upload is abandoned: on GCS :func:`write` uploads straight to the final name; a
  local file is written under a temporary name and renamed.
* **No rename.** :func:`rename` is a copy and a delete (on a disk ``os.rename``).
* **Exact names.** Beam's ``match`` reads a path as a glob, so a name holding
  ``[``, ``*`` or ``?`` would not find itself: listings here escape the folder.
* **A round trip per request.** Small whole files are read in one request, looked
  up in one, and deleted one by one by exact name (``etl.core.io.gcs`` on GCS); large
  files stream through Beam's ``FileSystems.open``.

TensorFlow's own file access (tf.Transform's temp files and ``transform_fn``, the
reader) does not come through here: docs/RUNNING_AT_SCALE.md.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import os
import posixpath
import warnings
from collections.abc import Iterator
from typing import IO, Any

from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from etl.core.io import gcs, local_tree

# Suffix of a local file still being written; a killed run's leftovers carry it.
INCOMPLETE_SUFFIX = ".incomplete"
_RAW = CompressionTypes.UNCOMPRESSED  # Never let a ".gz" name be (de)compressed.
_COPY_CHUNK_BYTES = 8 * 1024 * 1024
READ_CHUNK_BYTES = local_tree.READ_CHUNK_BYTES


@dataclasses.dataclass(frozen=True)
class FileInfo:
    """A file as a listing or :func:`stat` reports it: its path, size in bytes and
    last modification time (seconds since the epoch)."""

    path: str
    size: int
    mtime: float


def is_remote(path: str) -> bool:  # A URI (gs://...), not a local path.
    return "://" in path


def join(base: str, *names: str) -> str:  # With "/", URIs and local paths alike.
    return posixpath.join(base, *names)


def absolute(path: str) -> str:
    """``path`` without a trailing ``/``; a local one made absolute."""
    path = path.rstrip("/") or "/"
    return path if is_remote(path) else os.path.abspath(path)


def _scheme(path: str) -> str:
    return path.split("://", 1)[0] if is_remote(path) else ""


def configure(options: Any) -> None:
    """This process's filesystems use the job's Beam options, as Beam's workers do."""
    FileSystems.set_options(options)


def _prepare(path: str) -> str:
    """``path``, once this process is ready for its filesystem."""
    if _scheme(path) == "gs":
        gcs.prepare()
    return path


def _glob_escape(path: str) -> str:
    """``path`` as a Beam match pattern that matches only itself."""
    return "".join(f"[{c}]" if c in "[*?" else c for c in path)


def _match(pattern: str, limit: int | None = None) -> list[FileInfo]:
    """The files Beam's ``FileSystems.match`` finds for one pattern, sorted. An object
    named like a folder ("a/b/", what consoles make for an empty one) is no file."""
    with warnings.catch_warnings():
        # An escaped "[" ("[[]") reads to Python's re as a possible nested set.
        warnings.simplefilter("ignore", FutureWarning)
        found = FileSystems.match([_prepare(pattern)], limits=[limit])[0].metadata_list
    return sorted((FileInfo(m.path, m.size_in_bytes, m.last_updated_in_seconds)
                   for m in found if not m.path.endswith("/")), key=lambda f: f.path)


# Reading.

NotARegularFile = local_tree.NotARegularFile  # A FIFO, socket or device, refused.


def open_read(path: str) -> IO[bytes]:
    """A binary, seekable reader of ``path``'s bytes as stored.

    A local path is checked by ``stat`` before it is opened: anything but a regular
    file is refused unopened (``NotARegularFile``). The file is then opened without
    blocking and checked again on its descriptor, so a FIFO put in its place
    meanwhile cannot block either.

    Raises:
        NotARegularFile: if a local ``path`` is a FIFO, socket or device.
        OSError (Beam's ``BeamIOError``, or the filesystem's own): if it cannot be
            opened.
    """
    if not is_remote(path):
        return local_tree.open_regular(path)
    return FileSystems.open(_prepare(path), compression_type=_RAW)


def read_bytes(path: str, max_bytes: int | None = None) -> bytes:
    """The bytes of ``path``, or with ``max_bytes`` at most ``max_bytes + 1`` of them
    (so a file over a limit is detected without reading it whole).

    A GCS object is read in one ranged GET; a local file ``READ_CHUNK_BYTES`` at a
    time. (A time limit: ``etl.core.io.timed_calls``.)

    Raises:
        NotARegularFile: if a local ``path`` is a FIFO, socket or device (not opened).
        OSError: if the file cannot be read (``FileNotFoundError`` if it is not there).
    """
    if _scheme(path) == "gs":
        return gcs.read(path, max_bytes)
    with open_read(path) as f:
        return local_tree.read_at_most(f, max_bytes)


def read_text(path: str) -> str:
    return read_bytes(path).decode("utf-8")


def sha256(path: str, chunk_bytes: int = 1 << 20) -> str:
    """Hex SHA-256 of the file's bytes, read once."""
    digest = hashlib.sha256()
    with open_read(path) as f:
        while chunk := f.read(chunk_bytes):
            digest.update(chunk)
    return digest.hexdigest()


# What is there.

def exists(path: str) -> bool:
    """True if a file (an object) or a local folder is at exactly ``path``."""
    if _scheme(path) == "gs":
        return gcs.stat(path) is not None
    return FileSystems.exists(_prepare(path))


def special_kind(path: str) -> str | None:
    """What the local ``path`` is when it is not a regular file ("FIFO (named
    pipe)", "socket", ...: ``local_tree.special_kind``); None for a regular file,
    nothing there, and on an object store, whose objects are files."""
    return None if is_remote(path) else local_tree.special_kind(path)


def stat(path: str) -> FileInfo | None:
    """Size and modification time of the file at ``path``; None if there is none."""
    if not is_remote(path):
        try:
            result = os.stat(path)
        except FileNotFoundError:
            return None
        return FileInfo(path, result.st_size, result.st_mtime_ns / 1e9)
    if _scheme(path) == "gs":
        found = gcs.stat(path)
        return None if found is None else FileInfo(path, *found)
    matched = _match(_glob_escape(path))
    return matched[0] if matched else None


def list_files(folder: str) -> list[FileInfo]:
    """Every file under ``folder``, at any depth, sorted by path; none if the folder
    is missing. On an object store: every object whose name starts with
    ``folder/``."""
    folder = folder.rstrip("/")
    if not is_remote(folder):
        return [FileInfo(*found) for found in local_tree.walk_files(folder)]
    return _match(_glob_escape(folder) + "/**")


def relative_files(folder: str) -> list[str]:
    """The paths of :func:`list_files`, relative to ``folder``, with ``/``."""
    start = len(folder.rstrip("/")) + 1
    return [info.path[start:].replace(os.sep, "/") for info in list_files(folder)]


def glob(pattern: str) -> list[FileInfo]:
    """The files a user's glob (``*``, ``**``, ``?``, ``[...]``, Beam's syntax) or
    plain path matches, sorted by path."""
    return _match(pattern)


@dataclasses.dataclass(frozen=True)
class Listed:
    """A path :func:`list_tree` found; its size and mtime, or None (a dangling link)."""

    path: str
    info: FileInfo | None


def list_tree(root: str, allow_outside_root: bool = False) -> list[Listed]:
    """Every input candidate under the folder ``root``, sorted: on a disk with its
    links as ``local_tree.list_local_files`` lists them; on an object store every
    object under ``root/``, with its size and mtime from the listing itself."""
    if not is_remote(root):
        return [Listed(path, _stat_or_none(path))
                for path in local_tree.list_local_files(root, allow_outside_root)]
    return [Listed(info.path, info) for info in list_files(root)]


def _stat_or_none(path: str) -> FileInfo | None:
    try:  # A link loop, no permission: the read says so.
        return stat(path)
    except OSError:
        return None


def is_folder(path: str) -> bool:
    """True for a local folder, or a prefix with a file under it (in the first page
    of a listing: what comes first may be a console's folder object)."""
    if not is_remote(path):
        return os.path.isdir(path)
    return bool(_match(_glob_escape(path.rstrip("/")) + "/**", limit=1000))


def subfolders(folder: str) -> list[str]:
    """Names of the folders directly under ``folder``, sorted (none if it is not a
    folder): :func:`entries` ending in ``/``."""
    return [name[:-1] for name in entries(folder) if name.endswith("/")]


# Writing.

class _HashingWriter:
    """Passes bytes to ``raw`` and counts and hashes them on the way; ``path`` is the
    name they are written under (a local file's temporary name)."""

    def __init__(self, raw: IO[bytes], path: str) -> None:
        self.path = path
        self._raw = raw
        self._sha256 = hashlib.sha256()
        self.size = 0

    def write(self, data: Any) -> int:
        self._sha256.update(data)
        self.size += len(data)
        self._raw.write(data)
        return len(data)

    def flush(self) -> None:  # The file is completed when the block ends.
        pass

    @property
    def sha256(self) -> str:
        return self._sha256.hexdigest()


@contextlib.contextmanager
def write(path: str) -> Iterator[_HashingWriter]:
    """A binary writer whose bytes appear at ``path`` only if the block completes.

    On GCS the upload goes straight to ``path``: the object exists only once the
    block ends and the upload is finished; an error (or a killed process) abandons
    it, and nothing appears (Beam's GCS writer cancels its upload when its block ends
    in an error). Elsewhere the file is written under ``path + INCOMPLETE_SUFFIX``
    and renamed (replacing ``path``) at the end, and on an error the temporary file
    is removed: an atomic rename on a disk, a copy on other object stores, whose
    writers may complete an upload on close whatever happened. The writer's
    ``size`` and ``sha256`` are those of the bytes written, so nothing is read back
    to hash them.
    """
    if _scheme(path) == "gs":
        with FileSystems.create(_prepare(path), compression_type=_RAW) as raw:
            yield _HashingWriter(raw, path)
        return
    tmp_path = path + INCOMPLETE_SUFFIX
    try:
        with FileSystems.create(_prepare(tmp_path), compression_type=_RAW) as raw:
            yield _HashingWriter(raw, tmp_path)
    except BaseException:
        delete(tmp_path)
        raise
    rename(tmp_path, path)


def write_bytes(path: str, data: bytes) -> None:
    """Writes ``data`` to ``path``, whole or not at all (on GCS in one request)."""
    if _scheme(path) == "gs":
        gcs.write(_prepare(path), data)
        return
    with write(path) as out:
        out.write(data)


def write_text(path: str, text: str) -> None:
    write_bytes(path, text.encode("utf-8"))


# Moving and removing.

def copy(source: str, destination: str) -> None:
    """Copies one file, replacing ``destination``; across filesystems too."""
    if _scheme(source) == _scheme(destination):
        if not is_remote(destination):
            os.makedirs(os.path.dirname(destination) or ".", exist_ok=True)
        FileSystems.copy([_prepare(source)], [_prepare(destination)])
        return
    with open_read(source) as f:
        chunk = f.read(_COPY_CHUNK_BYTES)
        if len(chunk) < _COPY_CHUNK_BYTES:  # The whole file.
            write_bytes(destination, chunk)
            return
        with write(destination) as out:
            while chunk:
                out.write(chunk)
                chunk = f.read(_COPY_CHUNK_BYTES)


def copy_tree(source: str, destination: str) -> list[str]:
    """Copies every file under the folder ``source`` to the same relative path under
    ``destination`` (any two filesystems); returns the relative paths, sorted."""
    relpaths = relative_files(source)
    for relpath in relpaths:
        copy(join(source, relpath), join(destination, relpath))
    return relpaths


def rename(source: str, destination: str) -> None:
    """Moves one file, replacing ``destination``: ``os.rename`` on a local disk
    (atomic), a copy and then a delete on an object store (two requests)."""
    if not is_remote(source):
        os.replace(source, destination)
        return
    copy(source, destination)
    delete(source)


def delete(path: str) -> None:
    """Deletes the one file at exactly ``path``, if there is one."""
    if not is_remote(path):
        with contextlib.suppress(FileNotFoundError):
            os.remove(path)
        return
    if _scheme(path) == "gs":
        gcs.delete(path)
    elif exists(path):
        FileSystems.delete([_glob_escape(path)])


def delete_tree(folder: str) -> int:
    """Deletes every file under ``folder`` (and, on a disk, the folder); returns how
    many files there were."""
    if not is_remote(folder):
        return local_tree.delete_folder(folder)
    found = list_files(folder)
    for info in found:
        delete(info.path)
    return len(found)


def make_folder(folder: str) -> None:  # A local folder; an object store has none.
    if not is_remote(folder):
        os.makedirs(folder, exist_ok=True)


resolves_inside = local_tree.resolves_inside  # Links followed; URIs as written.


def entries(folder: str) -> list[str]:
    """Names of what is directly under ``folder``, sorted, a folder's with a trailing
    ``/``; none if there is no such folder. On GCS one delimited listing, however
    many objects lie deeper."""
    folder = folder.rstrip("/")
    if not is_remote(folder):
        return local_tree.entries(folder)
    if _scheme(folder) == "gs":
        return gcs.entries(folder)
    return sorted({name.split("/", 1)[0] + ("/" if "/" in name else "")
                   for name in relative_files(folder)})
