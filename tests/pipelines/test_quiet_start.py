"""The jobs do not print TensorFlow's C++ start-up lines unless the user asked for logs."""

from __future__ import annotations

import os
import subprocess
import sys

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# Lines TensorFlow 2.21 logs while its libraries load and its devices are listed.
STARTUP_MARKERS = ("absl::InitializeLog", "oneDNN custom operations", "cuda")


def _stderr_of_help(env: dict[str, str]) -> str:
    # Importing a job module imports TensorFlow, as a job's command does before it runs
    # (--help imports none: tests/pipelines/test_arguments.py); no job runs.
    result = subprocess.run([sys.executable, "-c", "import pipelines.images"],
                            cwd=REPO_ROOT, env=env, capture_output=True, text=True,
                            timeout=300, check=True)
    return result.stderr


def test_job_start_is_quiet_without_tf_cpp_min_log_level():
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    stderr = _stderr_of_help(env)
    assert not [m for m in STARTUP_MARKERS if m in stderr], stderr


def test_job_start_shows_tensorflow_logs_when_the_user_sets_the_level():
    # The user's own choice wins (and shows the markers above are the right ones).
    stderr = _stderr_of_help({**os.environ, "TF_CPP_MIN_LOG_LEVEL": "0"})
    assert "oneDNN custom operations" in stderr or "cuda" in stderr.lower(), stderr
