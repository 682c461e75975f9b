"""Pipeline options shared by the jobs: the offline-safe default runner, temp cleanup."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence

from apache_beam import Pipeline
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions
from apache_beam.runners.runner import PipelineResult, PipelineState

from pipelines import flags

# Beam's DirectRunner first tries to download and start the Prism runner, which stalls
# or fails without internet access. Its batch engine, the FnApiRunner, runs in-process
# and honours --direct_num_workers and --direct_running_mode, so it is our default.
DEFAULT_RUNNER = "apache_beam.runners.portability.fn_api_runner.FnApiRunner"

# With --environment_type=LOOPBACK, Beam's worker pool
# (runners/worker/worker_pool_main.py, BeamFnExternalWorkerPoolServicer.StartWorker)
# runs each SDK harness in a *daemon* thread named "run_worker_<worker id>". When the
# job is DONE the harness is only told to stop: it then tears its bundle processors
# down in that thread, and dropping tf.Transform's loaded SavedModel runs resource
# destructors that trace tf.functions in TensorFlow's C++ code. If the interpreter
# finalizes meanwhile, the daemon thread is ended by a forced unwind through C++
# frames that catch and do not rethrow it: "FATAL: exception not rethrown", SIGABRT,
# exit status 134 after the dataset was published.
LOOPBACK_HARNESS_THREAD_PREFIX = "run_worker_"
HARNESS_SHUTDOWN_TIMEOUT_S = 300.0

_LOGGER = logging.getLogger(__name__)


def pipeline_options(argv: Sequence[str] | None,
                     options_class: type[PipelineOptions] = PipelineOptions
                     ) -> PipelineOptions:
    """Beam options from ``argv`` with our default runner when ``--runner`` is absent.

    Parsing through the job's own ``options_class`` makes ``--help`` list its flags.

    Raises:
        ValueError: for an argument neither ``options_class`` nor Beam knows.
    """
    options = options_class(list(argv or []))
    flags.check_known_flags(list(argv or []), options_class)
    standard = options.view_as(StandardOptions)
    if not standard.runner:
        standard.runner = DEFAULT_RUNNER
    return options


def run_to_completion(pipeline: Pipeline) -> PipelineResult:
    """Runs ``pipeline`` and waits; returns its result (metrics); raises if it ends
    in any state but DONE."""
    try:
        result = pipeline.run()
        state = result.wait_until_finish()
    finally:
        join_sdk_harness_threads()
    if state != PipelineState.DONE:
        raise RuntimeError(f"Pipeline finished in state {state}, not DONE; see the "
                           f"runner's logs. No manifest was published.")
    return result


def join_sdk_harness_threads(timeout_s: float = HARNESS_SHUTDOWN_TIMEOUT_S
                             ) -> list[str]:
    """Waits for in-process SDK harness threads (LOOPBACK) to finish shutting down.

    Returns the names of those still alive after ``timeout_s`` (logged as a warning);
    an empty list when there were none, as with every runner but LOOPBACK.
    """
    deadline = time.monotonic() + timeout_s
    for thread in threading.enumerate():
        if thread.name.startswith(LOOPBACK_HARNESS_THREAD_PREFIX):
            thread.join(max(0.0, deadline - time.monotonic()))
    alive = [t.name for t in threading.enumerate()
             if t.name.startswith(LOOPBACK_HARNESS_THREAD_PREFIX) and t.is_alive()]
    if alive:
        _LOGGER.warning("SDK harness threads %s still shutting down after %.0f s; the "
                        "process may abort at exit.", alive, timeout_s)
    return alive


def remove_temp_dir(path: str) -> None:
    """Deletes the tf.Transform scratch directory once the job has succeeded."""
    import tensorflow as tf

    if tf.io.gfile.exists(path):
        tf.io.gfile.rmtree(path)
