"""The jobs as a user runs them: ``python -m pipelines.<job>`` in a child process."""

from __future__ import annotations

import os
import subprocess
import sys

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
