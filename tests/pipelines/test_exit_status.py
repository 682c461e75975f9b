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
tearing down when the main thread finalizes, which load makes likely (on 2026-11-24,
without the join, about one run in two aborted with one spinning process per core
beside it; on the 2-core Intel VM of 2026-11-28 none of ten exits did, with the
spinner for the whole round or only at the exits, nor did the harness thread outlive
a job under two spinners: Beam's teardown finished in time there).
The LOOPBACK round runs the image and the time-series command at the same time *and*,
from the first of them to publish its manifest until both have exited, a spinning
process, beside the suite's other test processes (three on two cores in CI), so every
exit happens with more runnable processes than cores, and each command reaches the
teardown: both write shards through the exported ``transform_fn``. One LOOPBACK
round gives two exits, so a reintroduced race may pass one run of the suite unnoticed
(about 1/4 at the load measured above); the cause itself is checked on every run by
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
from reader.format import contract
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
# (environment flags, whether the commands exit beside a spinning process).
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
def busy_core_at_exits(outputs: list[str]) -> Iterator[None]:
    """A spinning process from when the first of the jobs writing ``outputs`` has
    published its manifest until the block ends.

    The manifest is a job's last step: what follows it is the runner's teardown and
    the process's exit, where the race lives (1.65 s from the manifest to the exit of
    a LOOPBACK image command on an idle machine; the spinner spins within a poll of
    the manifest). Not for the whole round: a spinner costs the suite a core for as
    long as it spins (~50 s for the round). One, not one per core: the suite's other
    test processes load the cores too.
    """
    manifests = [os.path.join(out, contract.MANIFEST_FILENAME) for out in outputs]
    done = threading.Event()
    spinners: list[subprocess.Popen] = []

    def spin_from_the_first_manifest() -> None:
        while not done.wait(0.02):
            if any(map(os.path.exists, manifests)):
                spinners.append(subprocess.Popen([sys.executable, "-c", "while True: pass"]))
                return

    watcher = threading.Thread(target=spin_from_the_first_manifest, daemon=True)
    watcher.start()
    try:
        yield
    finally:
        done.set()
        watcher.join()
        for spinner in spinners:
            spinner.kill()
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


def _run_both(job_inputs: dict[str, JobInput], out_root, environment: tuple[str, ...],
              under_load: bool) -> dict[str, CommandRun]:
    """Both jobs' commands at once, their exits under load if ``under_load``; waits
    for both."""
    outputs = {job: str(out_root / job) for job in JOBS}
    runs = {}
    with busy_core_at_exits(list(outputs.values())) if under_load else (
            contextlib.nullcontext()):
        started = {job: start_job(job, f"--input={job_inputs[job].path}",
                                  f"--output_dir={out}", *job_inputs[job].flags,
                                  *PORTABLE, *environment)
                   for job, out in outputs.items()}
        for job, process in started.items():
            stdout, stderr = process.communicate(timeout=600)
            runs[job] = (process.returncode, stdout, stderr)
    published = {job: os.path.exists(os.path.join(out, contract.MANIFEST_FILENAME))
                 for job, out in outputs.items()}
    return {job: CommandRun(*runs[job], output_digests(out) if published[job] else None)
            for job, out in outputs.items()}


@pytest.fixture(scope="module", params=sorted(ENVIRONMENTS))
def portable_runs(request, job_inputs, tmp_path_factory: pytest.TempPathFactory
                  ) -> dict[str, CommandRun]:
    """Per job, its portable-runner command's run in one environment."""
    environment, under_load = ENVIRONMENTS[request.param]
    root = tmp_path_factory.mktemp(f"exit_{request.param}")
    return _run_both(job_inputs, root, environment, under_load)


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
