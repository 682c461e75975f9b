"""``import reader`` hides TensorFlow's C++ warnings unless the user set a level."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.reader.helpers import REPO_ROOT

# What a process sees after ``import reader``: the level, and whether TensorFlow started.
PROBE = ("import os, sys, reader; "
         "print(os.environ.get('TF_CPP_MIN_LOG_LEVEL'), 'tensorflow' in sys.modules)")


def _after_import_reader(level: str | None) -> str:
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    if level is not None:
        env["TF_CPP_MIN_LOG_LEVEL"] = level
    return subprocess.run([sys.executable, "-c", PROBE], cwd=REPO_ROOT, env=env,
                          capture_output=True, text=True, timeout=120,
                          check=True).stdout.strip()


def test_import_reader_sets_tensorflow_log_level_2_without_starting_it():
    assert _after_import_reader(None) == "2 False"


def test_import_reader_keeps_the_users_own_level():
    assert _after_import_reader("0") == "0 False"
    assert _after_import_reader("3") == "3 False"
