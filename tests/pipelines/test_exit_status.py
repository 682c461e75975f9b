"""The jobs as real commands on the portable runner: exit status 0 (under load with
the in-process LOOPBACK harness), and output byte-identical to the default runner's.

With ``--environment_type=LOOPBACK`` the SDK harness runs in a daemon thread of the
job's own process and tears tf.Transform's SavedModel down after the job is DONE; if
the interpreter finalizes meanwhile, the process dies with SIGABRT ("FATAL:
exception not rethrown", status 134) after printing its summary.
``runner_defaults.run_to_completion`` joins that thread before returning, which
``test_loopback_run_leaves_no_sdk_harness_thread`` checks deterministically; only
the exit status of a real command shows that nothing else aborts the exit.

Detection argument for the command tests: the abort needs a harness thread still
tearing down when the main thread finalizes, which load makes likely (without the
join, about one run in two aborted with one spinning process per core beside it).
The LOOPBACK round runs the image and the time-series command at the same time *and*
a spinning process, beside the suite's other test processes (three on two cores in
CI), so every exit happens with more runnable processes than cores, and each command
reaches the teardown: both write shards through the exported
``transform_fn``. One LOOPBACK round gives two exits, so a reintroduced race may
pass one run of the suite unnoticed (about 1/4 at the load measured above); the
cause itself is checked on every run by
``test_loopback_run_leaves_no_sdk_harness_thread``. The
subprocess-worker harness lives in its own process (no in-process teardown to race,
so no load is added): its round checks that its commands exit 0 and write the same
bytes.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import subprocess
import sys
import threading
from collections.abc import Iterator

import numpy as np
import pytest

from pipelines import runner_defaults
from reader import contract
from tests import image_fixtures
from tests.job_commands import start_job
from tests.job_runs import REPORT_DUPLICATES, TEST_IMAGE_SIZE, output_digests, run_images_job
from tests.series_fixtures import GEOMETRY, run_timeseries_job, series_rows, write_jsonl

PORTABLE = ("--runner=PortableRunner", "--job_endpoint=embed")
LOOPBACK = ("--environment_type=LOOPBACK",)
# An SDK harness subprocess started by the embedded job service, as on a real
# portable runner (the PROCESS environment is not supported by the embedded job
# service: its FnApiRunner registers no worker handler for beam:env:process:v1).
SUBPROCESS_WORKER = (
    "--environment_type=beam:env:harness_subprocess_python:v1",
    f"--environment_config={sys.executable} -m apache_beam.runners.worker.sdk_worker_main",
)
# (environment flags, whether the commands run beside a spinning process).
ENVIRONMENTS = {"loopback": (LOOPBACK, True), "subprocess_worker": (SUBPROCESS_WORKER, False)}
JOBS = ("images", "timeseries")


@dataclasses.dataclass(frozen=True)
class JobInput:
    """A job's input, its flags, and the default runner's output digests for them."""

    path: str
    flags: tuple[str, ...]
    expected: dict[str, str]


@dataclasses.dataclass(frozen=True)
class CommandRun:
    """One finished command; ``digests`` is None when it published no manifest."""

    returncode: int
    stdout: str
    stderr: str
    digests: dict[str, str] | None

    def describe(self) -> str:
        return (f"exit status {self.returncode}:\n{self.stdout[-2000:]}\n"
                f"{self.stderr[-4000:]}")


@contextlib.contextmanager
def busy_cores() -> Iterator[None]:
    """A spinning process for the duration of the block.

    One, not one per core: the suite's other test processes load the cores too, and
    each spinner costs the whole suite a core for the round (~50 s, measured).
    """
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"])]
    try:
        yield
    finally:
        for spinner in spinners:
            spinner.kill()
        for spinner in spinners:
            spinner.wait()


@pytest.fixture(scope="module")
def job_inputs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, JobInput]:
    """Per job: a small input and the default (in-process) runner's output for it."""
    images = str(tmp_path_factory.mktemp("exit_images"))
    image_fixtures.write_image_folder(images, copies=1)
    image_fixtures.write_bad_files(images)  # 5 of 38 inputs: dead letters too.
    # The report as the commands run it by default.
    image_flags = ("--num_shards=2", "--max_error_fraction=0.5", REPORT_DUPLICATES)
    image_out = str(tmp_path_factory.mktemp("exit_images_default") / "out")
    run_images_job(images, image_out, *image_flags)

    root = tmp_path_factory.mktemp("exit_series")
    rng = np.random.default_rng(1)
    rows = [row for series_id, n in (("a", 90), ("b", 120))
            for row in series_rows(series_id, rng.normal(size=n).round(4).tolist())]
    series = write_jsonl(root / "rows.jsonl", rows)
    series_out = str(root / "default")
    run_timeseries_job(series, series_out, *GEOMETRY)
    return {
        "images": JobInput(images, (f"--image_size={TEST_IMAGE_SIZE}", *image_flags),
                           output_digests(image_out)),
        "timeseries": JobInput(series, GEOMETRY, output_digests(series_out)),
    }


def _run_both(job_inputs: dict[str, JobInput], out_root, environment: tuple[str, ...]
               ) -> dict[str, CommandRun]:
    """Both jobs' commands at once; waits for both."""
    started = {}
    for job in JOBS:
        out = str(out_root / job)
        started[job] = out, start_job(job, f"--input={job_inputs[job].path}",
                                      f"--output_dir={out}", *job_inputs[job].flags,
                                      *PORTABLE, *environment)
    runs = {}
    for job, (out, process) in started.items():
        stdout, stderr = process.communicate(timeout=600)
        published = os.path.exists(os.path.join(out, contract.MANIFEST_FILENAME))
        runs[job] = CommandRun(process.returncode, stdout, stderr,
                               output_digests(out) if published else None)
    return runs


@pytest.fixture(scope="module", params=sorted(ENVIRONMENTS))
def portable_runs(request, job_inputs, tmp_path_factory: pytest.TempPathFactory
                  ) -> dict[str, CommandRun]:
    """Per job, its portable-runner command's run in one environment."""
    environment, under_load = ENVIRONMENTS[request.param]
    root = tmp_path_factory.mktemp(f"exit_{request.param}")
    with busy_cores() if under_load else contextlib.nullcontext():
        return _run_both(job_inputs, root, environment)


def _failure(run: CommandRun) -> str | None:
    return run.describe() if run.returncode != 0 or "Wrote dataset" not in run.stdout else None


def test_portable_image_command_exits_zero(portable_runs):
    assert _failure(portable_runs["images"]) is None


def test_portable_timeseries_command_exits_zero(portable_runs):
    assert _failure(portable_runs["timeseries"]) is None


def test_portable_image_command_output_is_byte_identical(portable_runs, job_inputs):
    expected = job_inputs["images"].expected
    assert sum(p.endswith(contract.SHARD_SUFFIX) for p in expected) >= 4  # 2 per split
    assert portable_runs["images"].digests == expected


def test_portable_timeseries_command_output_is_byte_identical(portable_runs, job_inputs):
    expected = job_inputs["timeseries"].expected
    assert portable_runs["timeseries"].digests == expected


def test_loopback_run_leaves_no_sdk_harness_thread(job_inputs, tmp_path):
    # The cause itself, deterministically: when the job returns, the LOOPBACK
    # harness thread has finished its shutdown.
    series = job_inputs["timeseries"]
    run_timeseries_job(series.path, str(tmp_path / "out"), *series.flags, *PORTABLE,
                       *LOOPBACK)
    harness = [t.name for t in threading.enumerate()
               if t.name.startswith(runner_defaults.LOOPBACK_HARNESS_THREAD_PREFIX)]
    assert harness == []
