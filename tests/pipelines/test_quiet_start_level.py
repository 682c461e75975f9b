"""A user's own ``TF_CPP_MIN_LOG_LEVEL`` wins at the jobs' start: TensorFlow's start-up
lines, which TensorFlow does not filter, are filtered by it as later lines are."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from pipelines.quiet_start import lines_at_level

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# How a job starts TensorFlow (pipelines/images.py, pipelines/timeseries.py), then the
# level the process ends with.
START_LIKE_A_JOB = ("from pipelines.quiet_start import import_tensorflow_quietly; "
                    "import_tensorflow_quietly(); "
                    "import os; print(os.environ['TF_CPP_MIN_LOG_LEVEL'])")
# What TensorFlow 2.21 prints as it starts, at any level (shortened), and a warning.
STARTUP = """\
WARNING: All log messages before absl::InitializeLog() is called are written to STDERR
I0000 00:00:1796559248.908952    7467 port.cc:153] oneDNN custom operations are on.
I0000 00:00:1796559248.968811    7467 cpu_feature_guard.cc:227] This TensorFlow binary
To enable the following instructions: AVX2 FMA, in other operations, rebuild TensorFlow
W0000 00:00:1796559249.000001    7467 some.cc:1] a warning
E0000 00:00:1796559253.873931    7467 cuda_platform.cc:52] failed call to cuInit: ERROR
"""


@pytest.mark.parametrize("level, kept", [
    (0, [0, 1, 2, 3, 4, 5]), (1, [0, 4, 5]), (2, [5]), (3, [])])
def test_lines_at_level_keeps_what_tensorflow_would_show(level, kept):
    # The note's continuation line (3) goes with it.
    lines = STARTUP.splitlines(keepends=True)
    assert lines_at_level(STARTUP, level) == "".join(lines[i] for i in kept)


def test_lines_at_level_keeps_lines_before_any_log_line():
    assert lines_at_level("not ours\n" + STARTUP, 3) == "not ours\n"


def test_job_start_at_the_users_level_3_prints_no_start_up_line():
    result = subprocess.run([sys.executable, "-c", START_LIKE_A_JOB], cwd=REPO_ROOT,
                            env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"},
                            capture_output=True, text=True, timeout=300, check=True)
    assert result.stdout.strip() == "3"  # Their value, not ours.
    assert result.stderr == "", result.stderr
