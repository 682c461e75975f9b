"""What a user's test imports: ``from pipelines import testing``.

Write a folder or manifest of real photos (crops of scikit-learn's two sample photos,
bad files on request) or a long-format series file, run a job on it in the test's
process, and check what it wrote as plain Python values::

    def test_my_folders(tmp_path):
        photos = testing.write_images(tmp_path / "in", per_label=5, bad=["truncated"])
        result = testing.run_images_job(photos.input, tmp_path / "out", "--image_size=32")
        assert result.rejected_reasons == photos.bad

The fixtures and the result's readers are ``etl.testing``'s, handed on here; the
job runs live here, in the layer that may call the jobs. Photos need scikit-learn
(``pip install 'tfrecord-etl[testing]'``). More, and why ``--image_size=32`` or less:
docs/TESTING_YOUR_DATA.md.
"""

from __future__ import annotations

import contextlib
import io
import os
from collections.abc import Callable, Sequence
from typing import Any

from etl.testing import (
    BAD_FILES,
    IMAGE_EXTENSIONS,
    ImageFixtures,
    JobResult,
    SeriesFixtures,
    StrPath,
    corrupt_mid_stream,
    encode_image,
    read_records,
    read_rejected,
    sample_photo,
    textured_jpeg,
    write_images,
    write_series,
)

__all__ = [
    "BAD_FILES",
    "IMAGE_EXTENSIONS",
    "ImageFixtures",
    "JobResult",
    "SeriesFixtures",
    "StrPath",
    "corrupt_mid_stream",
    "encode_image",
    "read_records",
    "read_rejected",
    "run_images_job",
    "run_timeseries_job",
    "sample_photo",
    "textured_jpeg",
    "write_images",
    "write_series",
]


def _run(run: Callable[[list[str]], dict[str, Any]], input_path: StrPath,
         output_dir: StrPath, flags: Sequence[str], quiet: bool) -> JobResult:
    argv = [f"--input={os.fspath(input_path)}", f"--output_dir={os.fspath(output_dir)}",
            *flags]
    stdout, stderr = io.StringIO(), io.StringIO()
    with (contextlib.redirect_stdout(stdout) if quiet else contextlib.nullcontext(),
          contextlib.redirect_stderr(stderr) if quiet else contextlib.nullcontext()):
        manifest = run(argv)
    return JobResult.from_output_dir(output_dir, manifest, stdout.getvalue(),
                                     stderr.getvalue())


def run_images_job(input_path: StrPath, output_dir: StrPath, *flags: str,
                   quiet: bool = True) -> JobResult:
    """Runs ``python -m pipelines.images --input=... --output_dir=... *flags`` in this
    process and returns what it wrote. ``quiet``: what the job prints (its summary,
    progress lines) goes to the result's ``stdout`` and ``stderr``, not the console.

    Raises:
        ValueError: invalid flags or input, before anything runs.
        etl.core.publishing.accounting.WithheldError: too many rejections, no train example or
            counts that do not reconcile: the job published no manifest.
    """
    from pipelines import images

    return _run(images.run, input_path, output_dir, flags, quiet)


def run_timeseries_job(input_path: StrPath, output_dir: StrPath, *flags: str,
                       quiet: bool = True) -> JobResult:
    """Runs ``python -m pipelines.timeseries`` in this process, as ``run_images_job``."""
    from pipelines import timeseries

    return _run(timeseries.run, input_path, output_dir, flags, quiet)
