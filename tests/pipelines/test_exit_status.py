"""The jobs as real commands: exit status 0 on the portable runner, under load.

With ``--environment_type=LOOPBACK`` the SDK harness runs in a daemon thread of the
job's own process and was still tearing tf.Transform's SavedModel down when the
interpreter finalized, so ~half the runs on a busy machine printed their summary and
then died with SIGABRT ("FATAL: exception not rethrown", status 134). In-process
tests cannot see that: only the exit status of a real command shows it. Each command
here runs several times while other processes keep every core busy (load is what
exposes the race), and its output must match the default runner's byte for byte.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import threading
from collections.abc import Iterator

import numpy as np
import pytest

from pipelines import runner_defaults
from tests import image_fixtures
from tests.conftest import TEST_IMAGE_SIZE, output_digests, run_images_job
from tests.pipelines.test_runners import SUBPROCESS_WORKER
from tests.pipelines.test_timeseries import GEOMETRY, series_rows, write_jsonl
from tests.pipelines.test_timeseries import run_job as run_timeseries_job

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PORTABLE = ("--runner=PortableRunner", "--job_endpoint=embed")
LOOPBACK = ("--environment_type=LOOPBACK",)
# Runs per command: enough that the old race (about 1 in 2 runs under this load)
# would almost surely have shown.
LOOPBACK_RUNS = 3
SUBPROCESS_WORKER_RUNS = 2


@contextlib.contextmanager
def busy_cores() -> Iterator[None]:
    """One spinning process per core for the duration of the block."""
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
                for _ in range(os.cpu_count() or 1)]
    try:
        yield
    finally:
        for spinner in spinners:
            spinner.kill()
        for spinner in spinners:
            spinner.wait()


def run_command(module: str, *args: str) -> subprocess.CompletedProcess:
    """``python -m <module> <args>`` from the repository root, as a user runs it."""
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    return subprocess.run([sys.executable, "-m", module, *args], cwd=REPO_ROOT, env=env,
                          capture_output=True, text=True, timeout=600, check=False)


@pytest.fixture(scope="module")
def image_input(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, dict[str, str]]:
    """A small image folder and the default runner's output digests for it."""
    root = str(tmp_path_factory.mktemp("exit_images"))
    image_fixtures.write_image_folder(root, copies=1)
    out = str(tmp_path_factory.mktemp("exit_images_default") / "out")
    run_images_job(root, out, "--num_shards=2")
    return root, output_digests(out)


@pytest.fixture(scope="module")
def series_input(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, dict[str, str]]:
    """A small long-format series file and the default runner's output digests."""
    root = tmp_path_factory.mktemp("exit_series")
    rng = np.random.default_rng(1)
    rows = [row for series_id, n in (("a", 90), ("b", 120))
            for row in series_rows(series_id, rng.normal(size=n).round(4).tolist())]
    path = write_jsonl(root / "rows.jsonl", rows)
    out = str(root / "default")
    run_timeseries_job(path, out, *GEOMETRY)
    return path, output_digests(out)


def _check_runs(module: str, input_path: str, expected: dict[str, str], tmp_path,
                flags: tuple[str, ...], runs: int) -> None:
    with busy_cores():
        for attempt in range(runs):
            out = str(tmp_path / f"out{attempt}")
            result = run_command(module, f"--input={input_path}", f"--output_dir={out}",
                                 *flags)
            assert result.returncode == 0, (
                f"run {attempt + 1} of {runs} exited with {result.returncode}:\n"
                f"{result.stdout[-2000:]}\n{result.stderr[-4000:]}")
            assert "Wrote dataset" in result.stdout
            assert output_digests(out) == expected


@pytest.mark.parametrize("environment,runs", [
    (LOOPBACK, LOOPBACK_RUNS), (SUBPROCESS_WORKER, SUBPROCESS_WORKER_RUNS),
], ids=["loopback", "subprocess_worker"])
def test_portable_image_command_exits_zero_under_load(image_input, tmp_path, environment,
                                                      runs):
    root, expected = image_input
    _check_runs("pipelines.images", root, expected, tmp_path,
                (f"--image_size={TEST_IMAGE_SIZE}", "--num_shards=2", *PORTABLE,
                 *environment), runs)


@pytest.mark.parametrize("environment,runs", [
    (LOOPBACK, LOOPBACK_RUNS), (SUBPROCESS_WORKER, SUBPROCESS_WORKER_RUNS),
], ids=["loopback", "subprocess_worker"])
def test_portable_timeseries_command_exits_zero_under_load(series_input, tmp_path,
                                                           environment, runs):
    path, expected = series_input
    _check_runs("pipelines.timeseries", path, expected, tmp_path,
                (*GEOMETRY, *PORTABLE, *environment), runs)


def test_run_to_completion_leaves_no_sdk_harness_thread(image_input, tmp_path):
    # The cause itself, deterministically: when the job returns, the LOOPBACK
    # harness thread has finished its shutdown (it used to be mid-teardown).
    root, expected = image_input
    out = str(tmp_path / "out")
    run_images_job(root, out, "--num_shards=2", *PORTABLE, *LOOPBACK)
    harness = [t.name for t in threading.enumerate()
               if t.name.startswith(runner_defaults.LOOPBACK_HARNESS_THREAD_PREFIX)]
    assert harness == []
    assert output_digests(out) == expected
