"""Preparing an output directory: refuse to clobber a finished dataset, clear leftovers."""

from __future__ import annotations

from etl.core import resume, storage, versions
from reader import contract

# Everything a job writes under its output directory, besides the manifest.
OWNED_ENTRIES: tuple[str, ...] = (
    *contract.SPLITS,
    contract.TRANSFORM_FN_DIRNAME,
    contract.TRANSFORMED_METADATA_DIRNAME,
    contract.RAW_METADATA_DIRNAME,
    contract.ERRORS_DIRNAME,
    "tmp",            # default tf.Transform scratch dir (--tft_temp_dir)
    "transform_tmp",  # tft_beam.WriteTransformFn's staging dir
    resume.PROGRESS_DIRNAME,
    versions.KEYS_DIRNAME,
)
# What an unfinished run leaves for a rerun to resume from: the shards it finished
# and its records of them (etl/core/resume.py decides, inside the run, what is kept).
RESUMABLE_ENTRIES: tuple[str, ...] = (*contract.SPLITS, resume.PROGRESS_DIRNAME)


def prepare_output_dir(output_dir: str, overwrite: bool, resume_run: bool = True,
                       append: bool = False) -> None:
    """Makes ``output_dir`` ready for a run.

    A directory holding a manifest is a finished dataset: it is replaced only with
    ``overwrite``, and then its manifest is deleted first so that the directory is
    never seen as complete while old and new files mix, and every entry is cleared.
    Leftovers of an unfinished run (no manifest) are cleared too, except, with
    ``resume_run``, its shards and progress records: the run decides which of them it
    keeps (``etl.core.resume.start_or_resume``). Only the entries a job writes are
    removed; other files in the directory are kept.

    ``append`` keeps the finished dataset whole (its manifest stays the published
    one until the run replaces it) and clears only scratch directories, and, without
    ``resume_run``, an interrupted append's progress.

    Raises:
        ValueError: if a finished dataset is there and ``overwrite`` is False.
    """
    manifest_path = storage.join(output_dir, contract.MANIFEST_FILENAME)
    if append:
        for name in ("tmp", "transform_tmp",
                     *(() if resume_run else (resume.PROGRESS_DIRNAME,))):
            storage.delete_tree(storage.join(output_dir, name))
        return
    if storage.exists(manifest_path):
        if not overwrite:
            raise ValueError(
                f"{output_dir!r} already holds a finished dataset ({contract.MANIFEST_FILENAME}"
                f" exists). Pass --overwrite to replace it, or choose another --output_dir.")
        storage.delete(manifest_path)
        resume_run = False
    for name in OWNED_ENTRIES:
        if resume_run and name in RESUMABLE_ENTRIES:
            continue
        storage.delete_tree(storage.join(output_dir, name))
    storage.make_folder(output_dir)
