"""Local folders with symbolic links: an input folder listed with its links, whether
a path lies under a root once those links are followed, and the one name of a file
under a root however its path is spelled; local names that are not UTF-8, as text
(:func:`escape_name`).

Part of the storage seam (``etl.core.io.storage`` uses it for local folders): object
stores have no links, so there a listing is a prefix and paths compare as written.
"""

from __future__ import annotations

import errno
import os
import posixpath
import re
import shutil
from stat import S_ISBLK, S_ISCHR, S_ISDIR, S_ISFIFO, S_ISREG, S_ISSOCK
from typing import IO

# Python's surrogateescape holds an undecodable byte b as the code point U+DC00 + b.
_UNDECODABLE = re.compile("[\udc80-\udcff]")


def _has_scheme(path: str) -> bool:
    return "://" in path


def list_local_files(root: str, allow_outside_root: bool = False) -> list[str]:
    """Every path under the local folder ``root`` that is an input candidate, sorted.

    Beam's local ``MatchFiles`` walks without following links, so it silently skips
    folders that are symbolic links (and links whose target is missing). Here:

    * files and links to files are listed, dangling links included (they become
      ``path_outside_root`` or ``unreadable_file`` dead letters);
    * each real folder is walked once, the real tree under ``root`` first, so a link
      to a folder already walked (a second name inside the root, a cycle) adds
      nothing: its files are listed once, under their real path;
    * a linked folder whose real path is outside the root is listed itself, not
      walked, so it becomes one ``path_outside_root`` dead letter and nothing outside
      the root is read or named; with ``allow_outside_root`` it is walked;
    * hidden folders (name starting with ``.``) are not walked: nothing in them is
      an input.

    Example:
        >>> list_local_files("/data/images")  # doctest: +SKIP
        ['/data/images/cat/1.png', '/data/images/cat/linked', '/data/images/dog/2.png']
    """
    real_root = os.path.realpath(root)
    listed: list[str] = []
    walked: set[str] = set()
    pending = [root]  # Folders to walk, as reached: the root, then linked folders.
    while pending:
        top = pending.pop(0)
        real_top = os.path.realpath(top)
        if real_top in walked:
            continue
        if not allow_outside_root and not _inside(real_top, real_root):
            listed.append(top)
            continue
        links: list[str] = []
        for folder, subfolders, files in os.walk(top):
            real_folder = os.path.realpath(folder)
            walked.add(real_folder)
            listed.extend(os.path.join(folder, name) for name in files)
            real_subfolders = []
            for name in sorted(subfolders):
                if name.startswith("."):
                    continue
                if os.path.islink(os.path.join(folder, name)):
                    links.append(os.path.join(folder, name))
                elif os.path.join(real_folder, name) not in walked:
                    real_subfolders.append(name)
            subfolders[:] = real_subfolders  # os.walk descends only into these.
        pending.extend(sorted(links))
    return sorted(listed)


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def resolves_inside(path: str, root: str) -> bool:
    """True if ``path`` lies under ``root`` once every symbolic link is followed.

    Both sides go through ``os.path.realpath``, so a root that is itself reached
    through a link (``/tmp`` is ``/private/tmp`` on macOS) still holds its files, and
    a dangling link counts where it points. Paths with a scheme (``gs://``, ``s3://``)
    are compared as written: object stores have no symbolic links.
    """
    if _has_scheme(path) or _has_scheme(root):
        return _inside(path, root)
    return _inside(os.path.realpath(path), os.path.realpath(root))


def escape_name(name: str) -> str:
    """``name``, a path as Python lists it, as text that is always valid UTF-8: itself
    unless it holds a byte that is not UTF-8.

    A file name is bytes; Python decodes a local one as UTF-8 and holds each byte that
    does not decode as a lone surrogate (``os.fsdecode``'s ``surrogateescape``), which
    no UTF-8 text, hash or JSON file can hold. Such a byte is written ``%XX`` (two
    upper-case hex digits, 80-FF). Every other character is kept, ``%`` included, so
    that a UTF-8 name keeps the key it always had (splits and ``--append``'s key index
    depend on it). The one name that can meet an escape, a UTF-8 name spelled like it
    (``caf%E9.jpg`` beside ``b"caf\xe9.jpg"``), gets the same key: the second of the
    two is a ``duplicate_key`` dead letter, never merged in silence.

    Example:
        >>> escape_name(os.fsdecode(b"cat/caf\xe9.jpg"))
        'cat/caf%E9.jpg'
        >>> escape_name("cat/caf%E9 100%.jpg")
        'cat/caf%E9 100%.jpg'
    """
    if not _UNDECODABLE.search(name):
        return name
    return _UNDECODABLE.sub(lambda m: f"%{ord(m[0]) - 0xDC00:02X}", name)


def is_file_name(path: str) -> bool:
    """False for text no file name can be: a lone surrogate, which only a JSON escape
    makes. A local name may hold ``U+DC80``-``U+DCFF``, the bytes that are not UTF-8
    as ``os.fsdecode`` holds them; an object's name (a URI) is UTF-8 text."""
    try:
        path.encode("utf-8", "strict" if _has_scheme(path) else "surrogateescape")
    except UnicodeEncodeError:
        return False
    return True


def _normalised_uri(uri: str) -> str:
    """``uri`` with ``posixpath.normpath`` applied to the object name after the bucket
    (``.``, ``..`` and repeated ``/`` removed; object stores have no links)."""
    scheme, rest = uri.split("://", 1)
    bucket, _, name = rest.partition("/")
    name = posixpath.normpath(name).lstrip("/") if name else ""
    return f"{scheme}://{bucket}/{'' if name == '.' else name}"


def resolve_under(path: str, root: str) -> tuple[str, str, bool]:
    """A path written relative to the folder ``root`` (or absolute, or a URI) →
    ``(name, uri, inside)``: one name per file, however the path is spelled.

    ``uri`` is the file it names, normalised (``posixpath.normpath``: ``./``, ``..``,
    repeated ``/``; on an object store after the bucket). When that lies under
    ``root`` (``inside``, :func:`relative_to_root`), ``name`` is its path relative to
    ``root``; otherwise the normalised path as written (relative, absolute or URI).
    Links under the root are not followed (:func:`resolves_inside` checks them).

    Example:
        >>> resolve_under("/data/./cat//a.png", "/data")
        ('cat/a.png', '/data/cat/a.png', True)
    """
    if _has_scheme(path):
        written = uri = _normalised_uri(path)
    elif os.path.isabs(path):
        written = uri = posixpath.normpath(path)
    else:
        written = posixpath.normpath(path.replace("\\", "/"))
        uri = (_normalised_uri(f"{root.rstrip('/')}/{written}") if _has_scheme(root)
               else posixpath.normpath(posixpath.join(root, written)))
    relative = "." if uri == root else relative_to_root(uri, root)
    return (written if relative is None else relative), uri, relative is not None


def relative_to_root(path: str, root: str) -> str | None:
    """``path`` relative to the folder ``root``, with ``/``, or None if it is not under
    it (or is ``root`` itself). Both are absolute and normalised.

    A path spelled under ``root`` is cut lexically (nothing is resolved: a link inside
    the root keeps its own name, as a folder listing names it). Otherwise, for local
    paths, the first of its folders that is ``root`` once links are followed (the root
    reached by another name, ``/tmp`` and ``/private/tmp`` on macOS) is cut instead.
    """
    if _inside(path, root) and path != root:
        return path[len(root.rstrip("/")) + 1:]
    if _has_scheme(path) or _has_scheme(root):
        return None
    real_root = os.path.realpath(root)
    parts = path.split("/")
    for end in range(2, len(parts)):
        if os.path.realpath("/".join(parts[:end])) == real_root:
            return "/".join(parts[end:])
    return None

# Opening a local file that may not be one: anything but a regular file is refused
# unopened, since reading one can block forever (a FIFO without a writer) or never end
# (``/dev/zero``).

class NotARegularFile(OSError, ValueError):
    """A local path that is a FIFO, a socket or a device, where a file is read: it
    is refused unopened, since reading one can block forever (a FIFO without a
    writer) or never end (``/dev/zero``). Also a ``ValueError``: given as a job's
    ``--input``, it is the user's to fix (one ``error:`` line)."""



# What a local path is when it is not a regular file, by its mode.
_SPECIAL_KINDS = ((S_ISFIFO, "FIFO (named pipe)"), (S_ISSOCK, "socket"),
                  (S_ISCHR, "character device"), (S_ISBLK, "block device"),
                  (S_ISDIR, "folder"))


def kind_of(mode: int) -> str | None:
    if S_ISREG(mode):
        return None
    return next((kind for test, kind in _SPECIAL_KINDS if test(mode)), "special file")


def _refuse_special(path: str, mode: int) -> None:
    """Raises unless ``mode`` (``path``'s ``st_mode``) is a regular file's."""
    kind = kind_of(mode)
    if kind is None:
        return
    if S_ISDIR(mode):  # What opening a folder raises.
        raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), path)
    raise NotARegularFile(f"{path!r} is a {kind}, not a regular file: not opened "
                          f"(reading one can block forever or never end)")


def _open_regular(path: str, flags: int) -> int:
    """``open``'s opener for a path ``stat`` found regular: opened non-blocking (a
    FIFO swapped in meanwhile has no writer to wait for) and not as a controlling
    terminal, checked again on the descriptor, then made blocking again."""
    fd = os.open(path, flags | os.O_NONBLOCK | os.O_NOCTTY)
    try:
        _refuse_special(path, os.fstat(fd).st_mode)
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_regular(path: str) -> IO[bytes]:
    """``path`` opened for reading, checked by ``stat`` first: anything but a regular
    file is refused unopened. It is then opened without blocking and checked again
    on its descriptor, so a FIFO put in its place meanwhile cannot block either.

    Raises:
        NotARegularFile: if ``path`` is a FIFO, socket or device.
        OSError: if it cannot be opened.
    """
    _refuse_special(path, os.stat(path).st_mode)
    return open(path, "rb", opener=_open_regular)


def special_kind(path: str) -> str | None:
    """What ``path`` is when it is not a regular file, by ``stat``, unopened; None for
    a regular file and a path with nothing there (or a link loop)."""
    try:
        return kind_of(os.stat(path).st_mode)
    except OSError:
        return None


# The local branches of the storage seam's reads, listings and deletes.

# Local files are read this much at a time (f.read(n) allocates n bytes up front): below
# glibc's mmap threshold (128 KiB), so a short read shrinks in place on the heap.
READ_CHUNK_BYTES = 64 * 1024


def read_at_most(f: IO[bytes], max_bytes: int | None) -> bytes:
    """The bytes of ``f``, or with ``max_bytes`` at most ``max_bytes + 1`` of them,
    ``READ_CHUNK_BYTES`` at a time."""
    if max_bytes is None:
        return f.read()
    chunks: list[bytes] = []
    remaining = max_bytes + 1
    while remaining > 0:
        chunk = f.read(min(remaining, READ_CHUNK_BYTES))
        if not chunk:
            break
        chunks.append(chunk)
        remaining -= len(chunk)
    # One chunk (a file under READ_CHUNK_BYTES) is returned as is, without a copy.
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def walk_files(folder: str) -> list[tuple[str, int, float]]:
    """``(path, size, mtime)`` of every file under ``folder``, sorted by path; none
    if the folder is missing."""
    found = []
    for parent, subfolders, names in os.walk(folder):
        subfolders.sort()
        for name in names:
            path = os.path.join(parent, name)
            try:
                result = os.stat(path)
            except FileNotFoundError:  # Gone since the walk saw it.
                continue
            found.append((path, result.st_size, result.st_mtime_ns / 1e9))
    return sorted(found)


def entries(folder: str) -> list[str]:
    """Names directly under ``folder``, sorted, a folder's with a trailing ``/``."""
    if not os.path.isdir(folder):
        return []
    return sorted(entry.name + ("/" if entry.is_dir() else "")
                  for entry in os.scandir(folder))


def delete_folder(folder: str) -> int:
    """Deletes ``folder`` and everything under it; returns how many files it held."""
    if not os.path.isdir(folder):
        return 0
    count = sum(len(names) for _, _, names in os.walk(folder))
    shutil.rmtree(folder)
    return count
