"""A Beam worker pool for ``--environment_type=EXTERNAL`` that several
TaskManagers (or Spark executors) can share.

``python -m pipelines.worker_pool --port=50000`` serves Beam's
``BeamFnExternalWorkerPool`` service: the runner asks it to start an SDK harness
process (``StartWorker``) for each environment it needs and to stop it
(``StopWorker``) when done. It is what ``scripts/flink.sh`` and
``scripts/spark.sh`` start, in a venv that holds this project's sdist.

Why not Beam's own ``apache_beam.runners.worker.worker_pool_main``:

* It keys its processes by the request's ``worker_id`` alone. The Java runner
  numbers workers per JVM (``1-1``, ``2-1``, ...), so two TaskManagers ask one
  pool for the same ids, and a ``StopWorker`` from one TaskManager kills the
  harness the other is still waiting for: the job hangs (seen on Flink 1.19 with
  Beam 2.62's job server, two TaskManagers, one pool). Here a worker is the pair
  (the caller's connection, ``worker_id``): the Java runner starts and stops an
  environment over one gRPC channel, so the pair is unique.
* It starts ``python`` from ``PATH``, not its own interpreter, so a pool started
  from a venv without activating it starts harnesses that cannot import Beam.
* It starts each harness as a new interpreter, which imports Beam, TensorFlow
  and our packages again: about 6 s of CPU a harness here, and Flink's batch
  runner starts a harness per TaskManager for each stage (38 for the small
  time-series job). Here harnesses are forked from a fork server
  (``multiprocessing``'s ``forkserver``) that imported those modules once, before
  any gRPC channel or TensorFlow thread exists: a harness starts in milliseconds,
  each still its own process.
* It pipes each harness's stdout into a pipe nobody reads; a harness that prints
  64 KiB blocks. Here harnesses write to the pool's own stdout and stderr (its log).
"""

from __future__ import annotations

import argparse
import logging
import multiprocessing
import signal
import threading
from collections.abc import Callable, Sequence
from concurrent import futures

import grpc
from apache_beam.portability.api import beam_fn_api_pb2, beam_fn_api_pb2_grpc

_LOGGER = logging.getLogger(__name__)
STOP_TIMEOUT_S = 10.0
# What every harness of these jobs imports: the fork server imports it once. A
# module that cannot be imported is skipped (multiprocessing ignores it).
PRELOAD = ("apache_beam.runners.worker.sdk_worker", "tensorflow",
           "tensorflow_transform.beam", "pipelines.images", "pipelines.timeseries")


def run_harness(control_url: str, worker_id: str) -> None:
    """One SDK harness (in a forked process), as Beam's own pool runs it."""
    from apache_beam.runners.worker.sdk_worker import SdkHarness

    SdkHarness(control_url, worker_id=worker_id, state_cache_size=0,
               data_buffer_time_limit_ms=-1).run()


class WorkerPool(beam_fn_api_pb2_grpc.BeamFnExternalWorkerPoolServicer):
    """Starts and stops SDK harness processes, one per (caller, worker id)."""

    def __init__(self, preload: Sequence[str] = PRELOAD,
                 harness: Callable[[str, str], None] = run_harness) -> None:
        """``harness(control_url, worker_id)`` runs in each forked process."""
        self._harness = harness
        self._lock = threading.Lock()
        self._workers: dict[tuple[str, str], multiprocessing.process.BaseProcess] = {}
        self._context = multiprocessing.get_context("forkserver")
        self._context.set_forkserver_preload(list(preload))

    def warm_up(self) -> None:
        """Starts the fork server (it imports ``PRELOAD``) before the first job."""
        process = self._context.Process(target=int)
        process.start()
        process.join()

    def StartWorker(self, request: beam_fn_api_pb2.StartWorkerRequest,
                    context: grpc.ServicerContext
                    ) -> beam_fn_api_pb2.StartWorkerResponse:
        key = (context.peer(), request.worker_id)
        try:
            process = self._context.Process(
                target=self._harness, args=(request.control_endpoint.url, request.worker_id),
                name=f"harness-{request.worker_id}", daemon=False)
            process.start()
        except OSError as e:
            return beam_fn_api_pb2.StartWorkerResponse(error=f"{type(e).__name__}: {e}")
        with self._lock:
            self._reap()
            self._workers[key] = process
        _LOGGER.info("started worker %s for %s: pid %d", request.worker_id, key[0],
                     process.pid)
        return beam_fn_api_pb2.StartWorkerResponse()

    def StopWorker(self, request: beam_fn_api_pb2.StopWorkerRequest,
                   context: grpc.ServicerContext) -> beam_fn_api_pb2.StopWorkerResponse:
        with self._lock:
            process = self._workers.pop((context.peer(), request.worker_id), None)
        if process is not None:
            _stop(process)
        else:
            # Not this caller's: a harness also ends by itself once its runner
            # closes the control stream, so leaving it is safe; killing one by id
            # alone could kill another TaskManager's.
            _LOGGER.info("no worker %s started by %s", request.worker_id, context.peer())
        return beam_fn_api_pb2.StopWorkerResponse()

    def stop_all(self) -> None:
        with self._lock:
            workers, self._workers = list(self._workers.values()), {}
        for process in workers:
            _stop(process)

    def _reap(self) -> None:
        """Forgets harnesses that have exited (their runner closed the stream)."""
        for key in [k for k, p in self._workers.items() if not p.is_alive()]:
            self._workers.pop(key).join()


def _stop(process: multiprocessing.process.BaseProcess) -> None:
    process.terminate()
    process.join(STOP_TIMEOUT_S)
    if process.is_alive():
        process.kill()
        process.join()


def serve(port: int, pool: WorkerPool | None = None) -> tuple[grpc.Server, WorkerPool, int]:
    """Starts the pool's gRPC server on 127.0.0.1; returns it, the pool and the port."""
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=16), options=[
        ("grpc.http2.max_pings_without_data", 0), ("grpc.http2.max_ping_strikes", 0)])
    pool = pool or WorkerPool()
    beam_fn_api_pb2_grpc.add_BeamFnExternalWorkerPoolServicer_to_server(pool, server)
    bound = server.add_insecure_port(f"127.0.0.1:{port}")
    if bound == 0:
        raise OSError(f"cannot listen on 127.0.0.1:{port}")
    server.start()
    return server, pool, bound


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=50000,
                        help="port on 127.0.0.1 (default %(default)s; 0 picks one)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    server, pool, port = serve(args.port)
    pool.warm_up()
    stopped = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stopped.set())
    print(f"worker pool listening on 127.0.0.1:{port}", flush=True)
    stopped.wait()
    server.stop(grace=None)
    pool.stop_all()


if __name__ == "__main__":
    main()
