"""Shared fixtures: generated image trees and one image-job run reused by many tests.

Helpers that test modules import live in plain modules (``tests/job_runs.py``,
``tests/image_fixtures.py``, ``tests/series_fixtures.py``): test modules import no
conftest and no other test module.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# One thread per op, the jobs' own default (pipelines/images.py), which they cannot
# set in a test process where TensorFlow has already started: three test processes
# on two cores otherwise each add a per-op pool of spinning threads.
os.environ.setdefault("TF_NUM_INTRAOP_THREADS", "1")

import pytest

from tests import image_fixtures
from tests.browser import browser  # noqa: F401 (the fixture, for every test module)
from tests.gcs_server import GcsServer
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


@pytest.fixture(scope="session")
def gcs_server(tmp_path_factory: pytest.TempPathFactory):
    """A local GCS server (fake-gcs-server) for this test process."""
    with GcsServer(str(tmp_path_factory.mktemp("gcs_server"))) as server:
        yield server


@dataclasses.dataclass(frozen=True)
class Bucket:
    """A test's own bucket on the local GCS server."""

    server: GcsServer
    name: str

    @property
    def url(self) -> str:
        return f"gs://{self.name}"


@pytest.fixture
def gcs_bucket(gcs_server, monkeypatch, tmp_path_factory, request) -> Bucket:
    """A fresh bucket on the local GCS server, with this process's environment
    hermetic for the test (what in-process jobs and the commands a test starts
    inherit): the server as ``STORAGE_EMULATOR_HOST``, no credentials file, an empty
    gcloud configuration and no metadata-server probe."""
    config = str(tmp_path_factory.mktemp("gcloud_config"))
    for name, value in gcs_server.hermetic_environment(config).items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("GOOGLE_APPLICATION_CREDENTIALS", raising=False)
    name = "t-" + hashlib.sha256(request.node.nodeid.encode()).hexdigest()[:20]
    gcs_server.create_bucket(name)
    return Bucket(gcs_server, name)
