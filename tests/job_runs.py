"""Running the image job in-process and reading back what a job wrote."""

from __future__ import annotations

import glob
import hashlib
import os
from typing import Any

import numpy as np

from reader import contract

# Small images keep the DirectRunner tests fast; the code path is the same at 224.
TEST_IMAGE_SIZE = 16


# The duplicate report costs every job run its stages' fixed overhead (about a second
# on this VM): runs that test something else leave it off. The runs that test it say
# --cross_split_duplicates themselves: tests/pipelines/test_duplicates.py (drop, on
# one and two workers, and the demo's digits with the default), the object-store runs
# (report on gs://) and tests/reader/test_other_readers.py (report on two workers).
DUPLICATES_FLAG = "--cross_split_duplicates"
# The command's default, for in-process runs compared with (or resuming) a command's.
REPORT_DUPLICATES = f"{DUPLICATES_FLAG}=report"


def run_images_job(input_path: str, output_dir: str, *flags: str) -> dict:
    """Runs ``python -m pipelines.images`` in-process; returns the manifest.
    Without a ``--cross_split_duplicates`` flag, with the report off."""
    from pipelines import images

    report = [] if any(f.startswith(DUPLICATES_FLAG) for f in flags) else [
        f"{DUPLICATES_FLAG}=off"]
    return images.run([f"--input={input_path}", f"--output_dir={output_dir}",
                       f"--image_size={TEST_IMAGE_SIZE}", *report, *flags])


def printing(run, *args: str) -> tuple[Any, str, str]:
    """``run(*args)`` (a job run in-process), with what it printed:
    ``(result, stdout, stderr)``."""
    import contextlib
    import io

    stdout, stderr = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        result = run(*args)
    return result, stdout.getvalue(), stderr.getvalue()


def run_images_job_printing(input_path: str, output_dir: str, *flags: str
                            ) -> tuple[dict, str, str]:
    """``run_images_job``, with what it printed: ``(manifest, stdout, stderr)``."""
    return printing(run_images_job, input_path, output_dir, *flags)


def output_digests(out: str) -> dict[str, str]:
    """sha256 of every shard (and record index), the manifest, the rejected-records
    file and, where written, the duplicate report and the key and hash indexes of a
    job's output: what "byte-identical output" compares."""
    paths = [*glob.glob(os.path.join(out, "*", "*.tfrecord*")),
             os.path.join(out, contract.MANIFEST_FILENAME),
             os.path.join(out, contract.ERRORS_DIRNAME, contract.REJECTED_FILENAME),
             *glob.glob(os.path.join(out, "duplicates", "*")),
             *glob.glob(os.path.join(out, "keys", "*"))]
    digests = {}
    for path in sorted(paths):
        with open(path, "rb") as f:
            digests[os.path.relpath(path, out)] = hashlib.sha256(f.read()).hexdigest()
    return digests


def files_under(out: str) -> list[str]:
    """Every file under ``out``, relative to it, sorted."""
    found = []
    for folder, _, names in os.walk(out):
        found += [os.path.relpath(os.path.join(folder, n), out) for n in names]
    return sorted(found)


def shard_digests(out: str) -> dict[str, str]:
    """``output_digests`` of the shard files (and record indexes) only."""
    return {path: digest for path, digest in output_digests(out).items()
            if ".tfrecord" in path}


def read_split(out: str, manifest: dict, split: str) -> dict[str, dict]:
    """Reads a split back with plain tf.data + parse_example; returns key → features."""
    import tensorflow as tf

    spec = contract.feature_spec_from_json(manifest["features"])
    files = [os.path.join(out, shard["path"]) for shard in manifest["splits"][split]["shards"]]
    if not files:
        return {}
    dataset = (tf.data.TFRecordDataset(files,
                                       compression_type=contract.tf_compression_type(manifest))
               .batch(64).map(lambda records: tf.io.parse_example(records, spec)))
    rows: dict[str, dict] = {}
    for batch in dataset:
        # A var_len feature (a set of label ids) becomes one array per example.
        arrays = {name: (np.array(tf.RaggedTensor.from_sparse(values).to_list(),
                                  dtype=object)
                         if isinstance(values, tf.SparseTensor) else values.numpy())
                  for name, values in batch.items()}
        for i in range(len(arrays["key"])):
            row = {name: values[i] for name, values in arrays.items()}
            rows[row["key"].decode()] = row
    return rows


def all_records(out: str, manifest: dict) -> dict[str, tuple[str, dict]]:
    """Every stored record of a job's output: key → (split, features)."""
    return {key: (split, row) for split in contract.SPLITS
            for key, row in read_split(out, manifest, split).items()}


def rejected_records(out: str) -> list[dict]:
    """The job's dead letters (``errors/rejected.jsonl``), one dict per line."""
    import json

    path = os.path.join(out, contract.ERRORS_DIRNAME, contract.REJECTED_FILENAME)
    with open(path) as f:
        return [json.loads(line) for line in f]


def run_main(monkeypatch, run, argv: list[str]) -> SystemExit:
    """Runs a job's console entry (``common.main(run)``) as ``python -m`` would, with
    ``argv``, in-process; returns the ``SystemExit`` it ends with (a string code is
    what the interpreter prints to stderr before exiting with status 1)."""
    import sys

    import pytest

    from pipelines import common

    monkeypatch.setattr(sys, "argv", [run.__module__, *argv])
    with pytest.raises(SystemExit) as exit_info:
        common.main(run)
    return exit_info.value
