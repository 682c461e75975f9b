"""pipelines.worker_pool: one pool shared by several TaskManagers whose worker ids
collide, over real gRPC, with stand-in harnesses (no job runs)."""

from __future__ import annotations

import time

import grpc
import psutil
import pytest
from apache_beam.portability.api import beam_fn_api_pb2, beam_fn_api_pb2_grpc, endpoints_pb2

from pipelines import worker_pool


def wait_for_stop(control_url: str, worker_id: str) -> None:
    """A stand-in harness: lives until it is stopped."""
    time.sleep(600)


@pytest.fixture
def pool_address():
    pool = worker_pool.WorkerPool(preload=(), harness=wait_for_stop)
    server, pool, port = worker_pool.serve(0, pool)
    yield pool, f"127.0.0.1:{port}"
    server.stop(grace=None)
    pool.stop_all()


def start(stub, worker_id: str, control: str) -> None:
    response = stub.StartWorker(beam_fn_api_pb2.StartWorkerRequest(
        worker_id=worker_id, control_endpoint=endpoints_pb2.ApiServiceDescriptor(url=control)))
    assert response.error == ""


def harness_pids(pool: worker_pool.WorkerPool) -> dict[tuple[str, str], int]:
    return {key: process.pid for key, process in pool._workers.items()}


def test_taskmanagers_with_the_same_worker_ids_keep_their_own_harnesses(pool_address):
    pool, address = pool_address
    # Two TaskManagers: each its own channel and connection (as Java's channels are;
    # Python's share one unless told not to), each numbering its workers 1-1.
    channels = [grpc.insecure_channel(address, options=[("grpc.use_local_subchannel_pool", 1)])
                for _ in range(2)]
    stubs = [beam_fn_api_pb2_grpc.BeamFnExternalWorkerPoolStub(c) for c in channels]
    start(stubs[0], "1-1", "localhost:1111")
    start(stubs[1], "1-1", "localhost:2222")
    pids = harness_pids(pool)
    assert len(pids) == 2 and len(set(pids.values())) == 2
    assert all(psutil.pid_exists(pid) for pid in pids.values())

    stubs[0].StopWorker(beam_fn_api_pb2.StopWorkerRequest(worker_id="1-1"))
    left = harness_pids(pool)
    assert len(left) == 1, "the first TaskManager's stop must stop its harness alone"
    [(peer, worker_id)] = left
    assert worker_id == "1-1" and left[(peer, worker_id)] in pids.values()
    stopped = set(pids.values()) - set(left.values())
    assert not any(psutil.pid_exists(pid) and psutil.Process(pid).status() != "zombie"
                   for pid in stopped)
    assert psutil.Process(left[(peer, worker_id)]).is_running()

    # A stop for an id this caller never started stops nothing.
    stubs[0].StopWorker(beam_fn_api_pb2.StopWorkerRequest(worker_id="1-1"))
    assert harness_pids(pool) == left
    stubs[1].StopWorker(beam_fn_api_pb2.StopWorkerRequest(worker_id="1-1"))
    assert harness_pids(pool) == {}
    for channel in channels:
        channel.close()


def test_stop_all_ends_every_harness(pool_address):
    pool, address = pool_address
    with grpc.insecure_channel(address) as channel:
        stub = beam_fn_api_pb2_grpc.BeamFnExternalWorkerPoolStub(channel)
        for n in range(3):
            start(stub, f"{n}-1", "localhost:1111")
    processes = [psutil.Process(pid) for pid in harness_pids(pool).values()]
    assert len(processes) == 3
    pool.stop_all()
    _, alive = psutil.wait_procs(processes, timeout=10)
    assert not alive
