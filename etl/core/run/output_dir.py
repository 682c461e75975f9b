"""Preparing an output folder: it belongs to the user until proven ours.

A run writes into ``--output_dir`` only when the folder is empty (or missing), holds
a dataset of ours (its ``manifest.json`` is one), or holds an interrupted run of
ours (its owner record, ``progress/owner.json``, written before anything else).
Any other non-empty folder is refused in one line naming what is there, and
nothing in it is changed: folder names prove nothing (``data/train/`` of raw
images is as common as ours).

In a folder of ours a run deletes only what a run of ours writes:

* in the split folders, the files named like our shards (final, pending, record
  indexes, ``*.incomplete``: :func:`resume.is_shard_file`), never other files;
* the folders a dataset of ours holds whole (``transform_fn/``, ``errors/``,
  ``statistics/``, ...) and a run's scratch (``tmp/``, ``transform_tmp/``,
  ``progress/``).

Files of the user's beside a dataset (``NOTES.md``, ``train/notes.txt``) are kept.
The lock that keeps a second run out (``etl.core.run.run_lock``) is taken before this.
"""

from __future__ import annotations

import dataclasses
import json
import sys

from etl.core.io import storage
from etl.core.run import resume, run_lock, versions
from reader.format import contract

# Folders only a dataset of ours holds: every file under them is a run's.
DATASET_FOLDERS: tuple[str, ...] = (
    contract.TRANSFORM_FN_DIRNAME,
    contract.TRANSFORMED_METADATA_DIRNAME,
    contract.RAW_METADATA_DIRNAME,
    contract.ERRORS_DIRNAME,
    versions.KEYS_DIRNAME,
    contract.STATISTICS_DIRNAME,
    contract.REPORT_RELPATH.split("/")[0],
    contract.DUPLICATES_SUMMARY_RELPATH.split("/")[0],
)
# A run's scratch: tf.Transform's default temp dir (--tft_temp_dir), its
# WriteTransformFn staging, and the progress records of an unfinished run.
SCRATCH_FOLDERS: tuple[str, ...] = ("tmp", "transform_tmp", resume.PROGRESS_DIRNAME)
OWNED_ENTRIES: tuple[str, ...] = (*contract.SPLITS, *DATASET_FOLDERS, *SCRATCH_FOLDERS)
OWNER_RECORD_RELPATH = f"{resume.PROGRESS_DIRNAME}/owner.json"
_OWNER_RECORD = json.dumps({"writer": "tfrecord-etl",
                            "format_version": contract.FORMAT_VERSION}).encode()
# What a folder holds, as :func:`inspect` classifies it.
EMPTY, DATASET, INTERRUPTED, FOREIGN = "empty", "dataset", "interrupted", "foreign"
_NAMED_ENTRIES = 5  # Entries a refusal names before "and N more".


def _say(line: str) -> None:
    print(f"[output] {line}", file=sys.stderr, flush=True)


@dataclasses.dataclass(frozen=True)
class FolderState:
    """What ``--output_dir`` holds: ``kind`` (EMPTY, DATASET, INTERRUPTED, FOREIGN) and
    its top-level entries (folders with a trailing ``/``), the lock left out."""

    kind: str
    entries: tuple[str, ...]


def is_our_manifest(data: bytes) -> bool:
    """True for a manifest one of our jobs wrote (format version, kind, splits)."""
    try:
        manifest = json.loads(data)
    except ValueError:
        return False
    return (isinstance(manifest, dict)
            and manifest.get("format_version") == contract.FORMAT_VERSION
            and manifest.get("kind") in (contract.IMAGES, contract.TIMESERIES)
            and isinstance(manifest.get("splits"), dict))


def check_output_path(output_dir: str) -> None:
    """Raises ValueError if a file stands where the output folder should be."""
    if storage.is_remote(output_dir):
        found = storage.stat(output_dir.rstrip("/"))
    else:
        found = storage.stat(output_dir) if not storage.is_folder(output_dir) else None
    if found is not None:
        raise ValueError(f"--output_dir {output_dir!r} is a file, not a folder; give a "
                         f"folder (new, empty, or one holding a dataset of ours).")


def inspect(output_dir: str) -> FolderState:
    """Classifies ``output_dir``: empty or missing, a dataset of ours, an interrupted
    run of ours (its owner record, or the fingerprint older runs began with), or
    anything else."""
    entries = tuple(e for e in storage.entries(output_dir) if e != run_lock.LOCK_FILENAME)
    if not entries:
        return FolderState(EMPTY, entries)
    manifest = storage.join(output_dir, contract.MANIFEST_FILENAME)
    if contract.MANIFEST_FILENAME in entries:
        if is_our_manifest(storage.read_bytes(manifest)):
            return FolderState(DATASET, entries)
        return FolderState(FOREIGN, entries)
    records = (OWNER_RECORD_RELPATH,
               f"{resume.PROGRESS_DIRNAME}/{resume.FINGERPRINT_FILENAME}")
    if any(storage.exists(storage.join(output_dir, r)) for r in records):
        return FolderState(INTERRUPTED, entries)
    return FolderState(FOREIGN, entries)


def _refusal(output_dir: str, state: FolderState) -> str:
    named = ", ".join(state.entries[:_NAMED_ENTRIES])
    more = len(state.entries) - _NAMED_ENTRIES
    if more > 0:
        named += f" and {more} more"
    what = ("a manifest.json that is not one of ours"
            if contract.MANIFEST_FILENAME in state.entries else
            "neither a dataset of ours nor an interrupted run's")
    return (f"--output_dir {output_dir!r} holds files this job did not write ({named}): "
            f"{what}. Nothing in it was changed; give a new or empty folder.")


def owned_files(output_dir: str, names: tuple[str, ...]) -> list[str]:
    """The files of ours under the entries ``names`` of a folder of ours, relative to
    it: every file of a dataset or scratch folder, our shards in a split folder."""
    found = []
    for name in names:
        folder = storage.join(output_dir, name)
        relpaths = storage.relative_files(folder)
        if name in contract.SPLITS:
            relpaths = [r for r in relpaths if resume.is_shard_file(r)]
        found += [f"{name}/{relpath}" for relpath in relpaths]
    return found


def remove_owned(output_dir: str, names: tuple[str, ...]) -> list[str]:
    """Deletes :func:`owned_files` under ``names``; returns what it deleted."""
    removed = owned_files(output_dir, names)
    for relpath in removed:
        storage.delete(storage.join(output_dir, relpath))
    for name in names:  # A disk's folders left empty go too; a user's file keeps one.
        if name not in contract.SPLITS and not storage.list_files(
                storage.join(output_dir, name)):
            storage.delete_tree(storage.join(output_dir, name))
    return removed


def _removal_summary(removed: list[str]) -> str:
    counts: dict[str, int] = {}
    for relpath in removed:
        top = relpath.split("/", 1)[0] + "/"
        counts[top] = counts.get(top, 0) + 1
    return ", ".join(f"{top} ({n} file{'s' if n != 1 else ''})"
                     for top, n in sorted(counts.items()))


def prepare_output_dir(output_dir: str, overwrite: bool, resume_run: bool = True,
                       append: bool = False) -> None:
    """Makes ``output_dir`` ready for a run, which holds its lock.

    A dataset of ours is replaced only with ``overwrite``, which says what it
    removes; its manifest goes first, so that the folder is never seen as complete
    while old and new files mix. Leftovers of an interrupted run of ours are cleared,
    except, with ``resume_run``, its shards and progress records: the run decides
    which of them it keeps (``etl.core.run.resume.start_or_resume``). ``append`` keeps
    the finished dataset whole and clears only scratch folders (and, without
    ``resume_run``, an interrupted append's progress).

    Raises:
        ValueError: if the folder holds anything but a dataset or an interrupted run
            of ours, or a dataset and ``overwrite`` is False.
    """
    state = inspect(output_dir)
    if state.kind == FOREIGN:
        raise ValueError(_refusal(output_dir, state))
    if append:
        remove_owned(output_dir, ("tmp", "transform_tmp",
                                  *(() if resume_run else (resume.PROGRESS_DIRNAME,))))
        return
    if state.kind == DATASET:
        if not overwrite:
            raise ValueError(
                f"{output_dir!r} already holds a finished dataset "
                f"({contract.MANIFEST_FILENAME} exists). Pass --overwrite to replace "
                f"it, or choose another --output_dir.")
        storage.delete(storage.join(output_dir, contract.MANIFEST_FILENAME))
        removed = remove_owned(output_dir, OWNED_ENTRIES)
        kept = [e for e in state.entries if e != contract.MANIFEST_FILENAME
                and e.rstrip("/") not in OWNED_ENTRIES]
        _say(f"--overwrite: removed the dataset in {output_dir}: manifest.json, "
             f"{_removal_summary(removed) or 'no other file'}"
             + (f"; kept what is not ours: {', '.join(kept)}" if kept else "") + ".")
        resume_run = False
    elif state.kind == INTERRUPTED:
        remove_owned(output_dir, tuple(
            name for name in OWNED_ENTRIES
            if not (resume_run and name in (*contract.SPLITS, resume.PROGRESS_DIRNAME))))
    storage.make_folder(output_dir)
    record = storage.join(output_dir, OWNER_RECORD_RELPATH)
    if not storage.exists(record):
        storage.write_bytes(record, _OWNER_RECORD)
