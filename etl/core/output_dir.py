"""Preparing an output directory: refuse to clobber a finished dataset, clear leftovers."""

from __future__ import annotations

import posixpath

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
)


def prepare_output_dir(output_dir: str, overwrite: bool) -> None:
    """Makes ``output_dir`` ready for a fresh run.

    A directory holding a manifest is a finished dataset: it is replaced only with
    ``overwrite``, and then its manifest is deleted first so that the directory is
    never seen as complete while old and new files mix. Leftovers of an unfinished
    run (no manifest) are always cleared, so stale shards cannot linger. Only the
    entries a job writes are removed; other files in the directory are kept.

    Raises:
        ValueError: if a finished dataset is there and ``overwrite`` is False.
    """
    import tensorflow as tf

    manifest_path = posixpath.join(output_dir, contract.MANIFEST_FILENAME)
    if tf.io.gfile.exists(manifest_path):
        if not overwrite:
            raise ValueError(
                f"{output_dir!r} already holds a finished dataset ({contract.MANIFEST_FILENAME}"
                f" exists). Pass --overwrite to replace it, or choose another --output_dir.")
        tf.io.gfile.remove(manifest_path)
    for name in OWNED_ENTRIES:
        path = posixpath.join(output_dir, name)
        if tf.io.gfile.isdir(path):
            tf.io.gfile.rmtree(path)
    tf.io.gfile.makedirs(output_dir)
