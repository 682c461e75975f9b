"""Local folders with symbolic links: an input folder listed with its links, and
whether a path lies under a root once those links are followed.

Part of the storage seam (``etl.core.storage`` uses it for local folders): object
stores have no links, so there a listing is a prefix and paths compare as written.
"""

from __future__ import annotations

import os


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
