"""The jobs as a user runs them: ``python -m pipelines.<job>`` in a child process."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def job_command(job: str, *args: str) -> list[str]:
    """The argv of ``python -m pipelines.<job> <args>``."""
    return [sys.executable, "-m", f"pipelines.{job}", *args]


def start_job(job: str, *args: str, env: dict[str, str] | None = None,
              **popen_kwargs) -> subprocess.Popen:
    """Starts the job's command from the repository root; stdout and stderr are piped
    as text unless ``popen_kwargs`` say otherwise."""
    kwargs = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, "text": True,
              **popen_kwargs}
    return subprocess.Popen(job_command(job, *args), cwd=REPO_ROOT,
                            env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", **(env or {})},
                            **kwargs)


def wait_until_stopped(process: subprocess.Popen, timeout_s: float = 300) -> None:
    """Waits until the job ``process`` (started with ``start_new_session=True``), or
    a worker process it started, has stopped itself at a pause point (SIGSTOP,
    ``etl/core/run/fault_injection.py``)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError("the job exited before reaching its pause point")
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                with open(f"/proc/{pid}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if fields[0] == "T" and int(fields[2]) == process.pid:
                return
        time.sleep(0.05)
    raise AssertionError(f"the job did not reach its pause point in {timeout_s} s")


def kill_job(process: subprocess.Popen) -> None:
    """SIGKILLs the job ``process`` (started with ``start_new_session=True``) and every
    worker it started, and reaps it."""
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()


def start_job_to_pause(job: str, *args: str, point: str) -> subprocess.Popen:
    """Starts the job's command, silent, in a session of its own, to freeze at
    ``point`` (``ETL_PAUSE_AT``: ``<point>`` or ``<point>:<n>``)."""
    from etl.core.run import fault_injection

    return start_job(job, *args, env={fault_injection.PAUSE_ENV: point},
                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                     start_new_session=True)


def kill_when_stopped(process: subprocess.Popen) -> None:
    """Waits for ``process`` (from ``start_job_to_pause``) to freeze, then SIGKILLs it
    and its workers; kills them even if it never freezes."""
    try:
        wait_until_stopped(process)
    finally:
        kill_job(process)


def run_until_killed(job: str, *args: str, point: str) -> None:
    """Runs the job's command until it freezes at ``point``, then kills it (-9)."""
    kill_when_stopped(start_job_to_pause(job, *args, point=point))
