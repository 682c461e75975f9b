"""A job command's end (pipelines/command.py): the interpreter's exit, less its teardown."""

from __future__ import annotations

import subprocess
import sys

import pytest

from pipelines.command import exit_status
from tests.job_commands import REPO_ROOT

# A "job" that starts a non-daemon thread and registers an atexit handler, then ends
# as argv[1] says: both must have finished before the process ends.
_SCRIPT = r"""
import atexit, sys, threading, time
from pipelines.command import run_command

def run(argv):
    def late():
        time.sleep(0.3)
        print("thread finished", flush=True)
    threading.Thread(target=late).start()
    atexit.register(print, "atexit ran")
    if argv[0] == "fail":
        raise ValueError("bad flag")
    print("published")

sys.argv = ["job", *sys.argv[1:]]
run_command(run)
print("never reached")
"""


def _run(outcome: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", _SCRIPT, outcome], cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=120)


def test_run_command_ends_as_the_interpreter_would_after_a_run():
    done = _run("ok")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["published", "thread finished", "atexit ran"]


def test_run_command_keeps_the_error_line_and_status_of_a_stopped_run():
    done = _run("fail")
    assert done.returncode == 1
    assert done.stderr.splitlines()[-1] == "error: bad flag"
    assert done.stdout.splitlines() == ["thread finished", "atexit ran"]


@pytest.mark.parametrize(("code", "status"), [(None, 0), (0, 0), (3, 3), ("error: x", 1)])
def test_exit_status_is_what_system_exit_gives(code, status, capsys):
    assert exit_status(code) == status
    assert capsys.readouterr().err == ("error: x\n" if isinstance(code, str) else "")
