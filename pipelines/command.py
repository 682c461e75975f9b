"""``python -m pipelines.<job>``'s end: the exit a plain interpreter makes, without its teardown.

When a job's command has finished, the interpreter would still tear down every
module and object it holds: TensorFlow's, Beam's and tf.Transform's, about a second
on a 2-core machine (measured on the 12-photo job: 7.0 s with the teardown, 6.1 s
without; a process that only imports TensorFlow, Beam and tf.Transform pays it
too). Nothing of the job's output depends on it: the dataset is published (or the
run has failed) and every file is closed before ``main`` returns. So the command
does what the interpreter's exit does that anyone can observe — the same exit
status and last line, non-daemon threads joined, ``atexit`` handlers run (logging's
flush, temporary folders, worker processes), standard streams flushed — and then
ends the process without the teardown (``os._exit``).
"""

from __future__ import annotations

import atexit
import importlib
import os
import sys
import threading
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

from pipelines import arguments


def exit_status(code: Any) -> int:
    """The status ``raise SystemExit(code)`` ends a process with; a text code is
    printed to stderr first, as the interpreter does (status 1)."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


def run_command(run: Callable[[Sequence[str]], Any]) -> NoReturn:
    """Runs ``common.main(run)`` with ``sys.argv`` and ends the process with its
    exit status, skipping only the interpreter's teardown (see the module)."""
    from pipelines import common  # Beam and TensorFlow: only for a run, not --help.

    try:
        common.main(run)
        status = 0
    except SystemExit as stop:
        status = exit_status(stop.code)
    # The first two steps of the interpreter's exit (Py_FinalizeEx), in its order:
    # threading's (executors told to stop, non-daemon threads joined), then atexit's.
    threading._shutdown()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # A closed pipe: nothing more reaches it.
            pass
    os._exit(status)


def run_job_command(job: str) -> NoReturn:
    """``python -m pipelines.<job>``: prints its ``--help`` (or ``--help_beam``) without
    importing the job, Beam or TensorFlow; otherwise imports ``pipelines.<job>``
    (TensorFlow starting quietly) and runs it (``run_command``)."""
    arguments.exit_if_help(job, sys.argv[1:])
    run_command(importlib.import_module(f"pipelines.{job}").run)
