"""Running the image job in-process and reading back what a job wrote, through
``etl.testing`` (what users' tests use too) with this suite's defaults."""

from __future__ import annotations

import contextlib
import glob
import hashlib
import os
from collections.abc import Iterator
from typing import Any

from reader.format import contract

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
    """Runs ``python -m pipelines.images`` in-process (``etl.testing.run_images_job``,
    printing what the job prints); returns the manifest. ``--image_size=16``, and
    without a ``--cross_split_duplicates`` flag, with the report off."""
    from pipelines import testing

    report = [] if any(f.startswith(DUPLICATES_FLAG) for f in flags) else [
        f"{DUPLICATES_FLAG}=off"]
    return testing.run_images_job(input_path, output_dir, f"--image_size={TEST_IMAGE_SIZE}",
                                  *report, *flags, quiet=False).manifest


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
    """Reads a split back (``etl.testing.read_records``: tf.data, each Example parsed
    as ``tf.io.parse_single_example`` gives it: NumPy values, ``bytes``); returns
    key → features."""
    from pipelines import testing

    return {row["key"].decode(): row
            for row in testing.read_records(out, split, manifest=manifest, as_numpy=True)}


def all_records(out: str, manifest: dict) -> dict[str, tuple[str, dict]]:
    """Every stored record of a job's output: key → (split, features)."""
    return {key: (split, row) for split in contract.SPLITS
            for key, row in read_split(out, manifest, split).items()}


def rejected_records(out: str) -> list[dict]:
    """The job's dead letters (``errors/rejected.jsonl``, and an appended version's
    file), one dict per line (``etl.testing.read_rejected``)."""
    from pipelines import testing

    return testing.read_rejected(out)


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


@contextlib.contextmanager
def restored_console() -> Iterator[Any]:
    """Restores what ``common.main`` changes in this process, after the block: the
    root logger's level and handler filters, ``sys.stderr`` and
    ``threading.excepthook``. Yields the ``MonkeyPatch`` that restores them."""
    import logging
    import sys
    import threading

    import pytest

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(sys, "stderr", sys.stderr)
        patch.setattr(threading, "excepthook", threading.excepthook)
        root = logging.getLogger()
        patch.setattr(root, "level", root.level)
        for handler in root.handlers:
            patch.setattr(handler, "filters", list(handler.filters))
        yield patch
