"""Pipeline options shared by the jobs: the offline-safe default runner, where a
runner's workers can reach files, and temp cleanup."""

from __future__ import annotations

import gc
import hashlib
import logging
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence

from apache_beam import Pipeline
from apache_beam.options.pipeline_options import (
    GoogleCloudOptions,
    PipelineOptions,
    StandardOptions,
)
from apache_beam.runners.runner import PipelineResult, PipelineState

from etl.core import storage
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


def runs_on_remote_workers(options: PipelineOptions) -> bool:
    """True when the runner's workers are other machines, which share no disk with
    this one (Dataflow)."""
    runner = options.view_as(StandardOptions).runner
    name = runner if isinstance(runner, str) else type(runner).__name__
    return name.rsplit(".", 1)[-1].endswith("DataflowRunner")


def require_shared_storage(options: PipelineOptions, paths: Mapping[str, str | None]
                           ) -> None:
    """Refuses local paths for a runner on remote workers, before anything runs.

    ``paths`` maps flags (``--input``) to their values; Beam's ``--temp_location``
    and ``--staging_location`` are checked too.

    Raises:
        ValueError: one line naming the first local path.
    """
    if not runs_on_remote_workers(options):
        return
    cloud = options.view_as(GoogleCloudOptions)
    every = {**paths, "--temp_location": cloud.temp_location,
             "--staging_location": cloud.staging_location}
    for flag, path in every.items():
        if path and not storage.is_remote(path):
            raise ValueError(
                f"{flag} {path!r} is on this machine's disk, which "
                f"{options.view_as(StandardOptions).runner} workers cannot see: give "
                f"gs:// paths for --input, --output_dir, --tft_temp_dir and "
                f"--temp_location.")


def default_tft_temp_dir(output_dir: str, options: PipelineOptions) -> str:
    """tf.Transform's scratch folder without ``--tft_temp_dir``: ``<output_dir>/tmp``,
    except for an object-store output written by a runner on this machine, where it
    is a local folder named after ``output_dir`` (the same for a rerun, which
    resumes): tf.Transform writes it through TensorFlow's own filesystem, and the
    time-series job spills its rows there, so local disk is both what works against
    any object store and what costs no requests."""
    if not storage.is_remote(output_dir) or runs_on_remote_workers(options):
        return storage.join(output_dir, "tmp")
    return scratch_dir(tempfile.gettempdir(), output_dir)


def scratch_dir(parent: str, output_dir: str) -> str:
    """The run's own scratch folder under a folder it shares (``--tft_temp_dir``, the
    system's temp folder): named after ``output_dir``, so that a rerun finds it and
    runs into other output folders do not, and removed at the end without touching
    anything else in ``parent``."""
    name = hashlib.sha256(output_dir.encode()).hexdigest()[:16]
    return storage.join(parent, f"tfrecord-etl-{name}")


def run_to_completion(pipeline: Pipeline) -> PipelineResult:
    """Runs ``pipeline`` and waits; returns its result (metrics); raises if it ends
    in any state but DONE.

    The objects alive before the run (TensorFlow's, Beam's, the job graph: some
    600,000 that the garbage collector tracks) are frozen meanwhile, so that a full
    collection does not walk them all again: on 20,000 web photos, the image job's
    full collections took 2.45 s, 1.37 s with them frozen.
    """
    gc.freeze()
    try:
        result = pipeline.run()
        state = result.wait_until_finish()
    finally:
        join_sdk_harness_threads()
        gc.unfreeze()
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
    storage.delete_tree(path)
