"""Shared fixtures: generated image trees and one image-job run reused by many tests.

Helpers that test modules import live in plain modules (``tests/job_runs.py``,
``tests/image_fixtures.py``, ``tests/series_fixtures.py``): test modules import no
conftest and no other test module.
"""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# One thread per op, the jobs' own default (pipelines/images.py), which they cannot
# set in a test process where TensorFlow has already started: three test processes
# on two cores otherwise each add a per-op pool of spinning threads.
os.environ.setdefault("TF_NUM_INTRAOP_THREADS", "1")

import pytest

from tests import image_fixtures
from tests.job_runs import run_images_job


@pytest.fixture(scope="session")
def image_folder(tmp_path_factory: pytest.TempPathFactory):
    """An ImageFolder tree with every supported format plus known-bad files.

    Returns (root, good fixture images, {bad key: expected reason}).
    """
    root = str(tmp_path_factory.mktemp("image_folder"))
    good = image_fixtures.write_image_folder(root)
    bad = image_fixtures.write_bad_files(root)
    return root, good, bad


@pytest.fixture(scope="session")
def png_dataset(image_folder, tmp_path_factory: pytest.TempPathFactory):
    """The image job's output (lossless PNG storage) for ``image_folder``."""
    root, _, _ = image_folder
    out = str(tmp_path_factory.mktemp("png_dataset"))
    manifest = run_images_job(root, out, "--image_format=png")
    return out, manifest
