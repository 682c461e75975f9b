"""Pipeline options shared by the jobs: the offline-safe default runner, where a
runner's workers can reach files, and temp cleanup."""

from __future__ import annotations

import gc
import hashlib
import logging
import os
import re
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence

from apache_beam import Pipeline
from apache_beam.options.pipeline_options import (
    FlinkRunnerOptions,
    GoogleCloudOptions,
    PipelineOptions,
    PortableOptions,
    SparkRunnerOptions,
    StandardOptions,
)
from apache_beam.portability import common_urns, python_urns
from apache_beam.runners.portability.flink_runner import (
    MAGIC_HOST_NAMES as EMBEDDED_FLINK_MASTERS,
)
from apache_beam.runners.portability.spark_runner import (
    LOCAL_MASTER_PATTERN as LOCAL_SPARK_MASTER,
)
from apache_beam.runners.runner import PipelineResult, PipelineState

from etl.core.io import storage
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

# SDK harness environments that run in this process or a child of it: LOOPBACK, and
# those only Beam's Python job service (--job_endpoint=embed) runs.
_HARNESS_HERE = frozenset({
    python_urns.EMBEDDED_PYTHON_LOOPBACK, python_urns.EMBEDDED_PYTHON,
    python_urns.EMBEDDED_PYTHON_GRPC, python_urns.SUBPROCESS_SDK})
_DOCKER = common_urns.environments.DOCKER.urn
_GIVE_GS = "give gs:// paths for --input, --output_dir, --tft_temp_dir and --temp_location"

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


def remote_workers(options: PipelineOptions) -> str | None:
    """Whose workers share no disk with this machine, with the flag that says so
    (``FlinkRunner workers (--flink_master=10.0.0.9:8081)``); None for a runner
    whose Python SDK harness, which reads and writes every file, runs here.

    Here: the default runner; a harness in this process (LOOPBACK, Beam's default
    for a local master) or one only Beam's Python job service runs (its embedded
    and subprocess environments); Flink with an embedded ``--flink_master``
    ([auto], [local]) or Spark with a ``local[...]`` master, which the runner starts
    on this machine, in any environment but Docker (Beam mounts none of this disk
    into its containers). Elsewhere: Dataflow; a Flink or Spark cluster, or a job
    service of its own (``--job_endpoint``); PortableRunner in any other
    environment (PROCESS, EXTERNAL, DOCKER, its default).
    """
    name = _runner_name(options)
    kind = _runner_kind(name)
    if kind == "dataflow":
        return f"{name} workers"
    if kind not in ("flink", "spark", "portable"):
        return None
    portable = options.view_as(PortableOptions)
    environment = (portable.environment_type or "").strip()
    if kind == "flink":
        master = options.view_as(FlinkRunnerOptions).flink_master.strip()
        local_master, setting = master in EMBEDDED_FLINK_MASTERS, f"--flink_master={master}"
    elif kind == "spark":
        master = options.view_as(SparkRunnerOptions).spark_master_url.strip()
        local_master = re.match(LOCAL_SPARK_MASTER, master) is not None
        setting = f"--spark_master_url={master}"
    else:
        local_master = False
        setting = f"--environment_type={environment or 'DOCKER, the default'}"
    # With a local master and no --environment_type, Beam runs the harness LOOPBACK.
    urn = _environment_urn(environment or ("LOOPBACK" if local_master else "DOCKER"))
    if urn in _HARNESS_HERE:
        return None
    if local_master and portable.job_endpoint:  # That job service's master runs it.
        setting = f"--job_endpoint={portable.job_endpoint}"
    elif local_master and urn == _DOCKER:
        setting = f"--environment_type={environment}"
    elif local_master:
        return None
    return f"{name} workers ({setting})"


def _runner_name(options: PipelineOptions) -> str:
    """``--runner``'s class name: ``FlinkRunner`` for ``apache_beam...FlinkRunner``."""
    runner = options.view_as(StandardOptions).runner or DEFAULT_RUNNER
    return (runner if isinstance(runner, str) else type(runner).__name__).rsplit(".", 1)[-1]


def _runner_kind(name: str) -> str:
    """``flink`` for ``FlinkRunner`` and ``flink`` (Beam takes both); ``dataflow``
    for ``DataflowRunner`` and ``TestDataflowRunner``."""
    kind = name.lower().removesuffix("runner")
    return "dataflow" if kind.endswith("dataflow") else kind


def _environment_urn(environment_type: str) -> str:
    """``--environment_type`` as Beam's ``Environment.from_options`` reads it: a
    ``beam:env:`` URN, LOOPBACK, or a name of ``common_urns.environments``."""
    if environment_type == "LOOPBACK":
        return python_urns.EMBEDDED_PYTHON_LOOPBACK
    known = getattr(common_urns.environments, environment_type, None)
    return getattr(known, "urn", environment_type)


def runs_on_remote_workers(options: PipelineOptions) -> bool:
    """True when the runner's workers share no disk with this machine
    (``remote_workers``)."""
    return remote_workers(options) is not None


def parse_shared_folders(value: str | None) -> list[str]:
    """``--shared_folders`` as absolute, normalised local folders.

    Raises:
        ValueError: one line naming an entry that is not a folder on this machine.
    """
    folders = []
    for folder in (part.strip() for part in (value or "").split(",")):
        if folder and storage.is_remote(folder):
            raise ValueError(f"--shared_folders {folder!r} is not a local folder: list "
                             f"the folders every worker host mounts at the same path as "
                             f"this machine; object store paths need no listing.")
        if folder and not storage.is_folder(folder):
            raise ValueError(f"--shared_folders {folder!r} is not a folder on this "
                             f"machine: mount it here at the path the workers see it "
                             f"at, or leave it out.")
        if folder:
            folders.append(storage.absolute(folder))
    return folders


def is_inside(path: str, folders: Sequence[str]) -> bool:
    """True when local ``path`` is one of ``folders`` (absolute, normalised) or lies
    under one: ``/mnt/shared/x`` is inside ``/mnt/shared``, ``/mnt/shared2`` is not."""
    path = storage.absolute(path)
    return any(os.path.commonpath([folder, path]) == folder for folder in folders)


def require_shared_storage(options: PipelineOptions, paths: Mapping[str, str | None],
                           shared_folders: str | None = None) -> None:
    """Refuses, before anything runs, a local path the runner's workers cannot see.

    ``paths`` maps flags (``--input``) to their values; Beam's ``--temp_location``
    is checked too, and ``--staging_location`` on Dataflow. Where the workers are
    other machines (``remote_workers``), a local path must lie inside one of
    ``shared_folders`` (``--shared_folders``: folders every worker host mounts at
    the same path); Dataflow's workers mount none.

    Raises:
        ValueError: one line naming the flag, the path and the runner.
    """
    workers = remote_workers(options)
    dataflow = _runner_kind(_runner_name(options)) == "dataflow"
    if dataflow and (shared_folders or "").strip():
        raise ValueError(f"--shared_folders is for Flink or Spark clusters whose hosts "
                         f"mount a shared folder; {workers} mount none of this "
                         f"machine's folders: leave it out and {_GIVE_GS}.")
    folders = parse_shared_folders(shared_folders)
    if workers is None:
        return
    cloud = options.view_as(GoogleCloudOptions)
    every = {**paths, "--temp_location": cloud.temp_location,
             **({"--staging_location": cloud.staging_location} if dataflow else {})}
    for flag, path in every.items():
        if path and not storage.is_remote(path) and not is_inside(path, folders):
            raise ValueError(_refusal(flag, path, workers, dataflow, folders))


def _refusal(flag: str, path: str, workers: str, dataflow: bool,
             folders: Sequence[str]) -> str:
    if dataflow:
        return (f"{flag} {path!r} is on this machine's disk, which {workers} cannot "
                f"see: {_GIVE_GS}.")
    if folders:
        return (f"{flag} {path!r} is on this machine's disk outside --shared_folders "
                f"({', '.join(folders)}), which {workers} cannot see: {_GIVE_GS}, or "
                f"a path inside one of those folders.")
    return (f"{flag} {path!r} is on this machine's disk, which {workers} cannot see: "
            f"{_GIVE_GS}, or, if every worker host mounts a shared folder (NFS, "
            f"Filestore) at the same path, paths inside it and "
            f"--shared_folders=<that folder>.")


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
