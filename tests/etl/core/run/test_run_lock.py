"""Unit tests of etl/core/run/run_lock.py and the storage functions it races with
(create_new, read_versioned, replace_versioned, delete_versioned), on a local disk
and on a real GCS server (its ifGenerationMatch preconditions)."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import threading
import time

import pytest

from etl.core.io import conditional_writes, storage
from etl.core.run import run_lock


def test_create_new_writes_only_where_nothing_is(root):
    path = storage.join(root, "x.lock")
    assert conditional_writes.create_new(path, b"first") is not None
    assert conditional_writes.create_new(path, b"second") is None
    assert storage.read_bytes(path) == b"first"


def test_create_new_lets_exactly_one_of_many_racers_win(root):
    path = storage.join(root, "x.lock")
    storage.make_folder(root)
    won, start = [], threading.Barrier(8)

    def race(i: int) -> None:
        start.wait()
        if conditional_writes.create_new(path, str(i).encode()) is not None:
            won.append(i)

    threads = [threading.Thread(target=race, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(won) == 1
    assert storage.read_bytes(path) == str(won[0]).encode()


def test_replace_and_delete_versioned_act_only_on_the_version_read(root):
    path = storage.join(root, "x.lock")
    token = conditional_writes.create_new(path, b"v1")
    found = conditional_writes.read_versioned(path)
    assert (found.data, found.token) == (b"v1", token)
    newer = conditional_writes.replace_versioned(path, b"v2", token)
    assert newer is not None and newer != token
    assert conditional_writes.replace_versioned(path, b"v3", token) is None  # Stale token.
    if not storage.is_remote(root):
        # The local GCS server ignores a DELETE's precondition (fsouza/fake-gcs-server
        # #1282, fixed by #2343, after the binary the tests have); GCS answers 412.
        assert conditional_writes.delete_versioned(path, token) is False
    assert storage.read_bytes(path) == b"v2"
    assert conditional_writes.delete_versioned(path, newer) is True
    assert conditional_writes.read_versioned(path) is None
    assert conditional_writes.delete_versioned(path, newer) is False
    if not storage.is_remote(root):  # Nothing is left beside it either.
        assert os.listdir(root) == []


def test_a_lock_names_its_holder_and_is_released(root):
    lock = run_lock.RunLock.acquire(root)
    holder = json.loads(storage.read_bytes(run_lock.lock_path(root)))
    assert (holder["host"], holder["pid"]) == (socket.gethostname(), os.getpid())
    assert holder["run_id"] == lock.holder.run_id
    lock.release()
    assert conditional_writes.read_versioned(run_lock.lock_path(root)) is None


def test_a_second_run_is_refused_in_one_line_naming_the_holder(root):
    with run_lock.RunLock.acquire(root) as lock:
        with pytest.raises(run_lock.LockHeldError) as refused:
            run_lock.RunLock.acquire(root)
        found = json.loads(storage.read_bytes(run_lock.lock_path(root)))
        assert found["run_id"] == lock.holder.run_id  # Still the first run's.
    message = str(refused.value)
    assert "\n" not in message
    assert message.startswith(
        f"--output_dir {root!r} is in use by another run (host {socket.gethostname()}, "
        f"pid {os.getpid()}, started {lock.holder.started}); it is not changed.")


def _plant(root: str, **fields) -> None:
    """A lock file as another run left it."""
    holder = {"run_id": "0" * 32, "host": socket.gethostname(), "pid": os.getpid(),
              "started": "2026-01-02T03:04:05Z", "renewed": time.time(),
              "lease_s": 300.0, **fields}
    storage.write_bytes(run_lock.lock_path(root), json.dumps(holder).encode())


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_a_lock_whose_process_is_gone_is_taken_over_in_one_line(root, capsys):
    pid = _dead_pid()
    _plant(root, pid=pid)
    with run_lock.RunLock.acquire(root) as lock:
        assert json.loads(storage.read_bytes(run_lock.lock_path(root)))["run_id"] == (
            lock.holder.run_id)
    assert capsys.readouterr().err == (
        f"[lock] taking over {root} from an earlier run (host {socket.gethostname()}, "
        f"pid {pid}, started 2026-01-02T03:04:05Z): its process no longer exists.\n")


def test_a_lock_from_another_host_is_held_until_its_lease_runs_out(root, capsys):
    _plant(root, host="elsewhere", pid=1, renewed=time.time() - 10, lease_s=300.0)
    with pytest.raises(run_lock.LockHeldError, match="host elsewhere, pid 1"):
        run_lock.RunLock.acquire(root)
    _plant(root, host="elsewhere", pid=1, renewed=time.time() - 400, lease_s=300.0)
    with run_lock.RunLock.acquire(root):
        pass
    err = capsys.readouterr().err
    assert err.startswith(f"[lock] taking over {root} from an earlier run (host "
                          f"elsewhere, pid 1, started 2026-01-02T03:04:05Z): its lease "
                          f"ran out "), err


def test_a_held_lock_is_renewed_so_it_never_goes_stale(root):
    with run_lock.RunLock.acquire(root, lease_s=0.4) as lock:
        first = lock.holder.renewed
        time.sleep(1.0)
        found = json.loads(storage.read_bytes(run_lock.lock_path(root)))
        assert found["renewed"] > first
        assert run_lock.why_stale(run_lock.Holder(**found), time.time()) is None


def test_a_run_whose_lock_was_taken_over_says_so_and_leaves_the_new_one(root, capsys):
    lock = run_lock.RunLock.acquire(root, lease_s=1000)
    _plant(root, run_id="1" * 32)  # Another run took it over meanwhile.
    lock.renew()
    lock.release()
    assert json.loads(storage.read_bytes(run_lock.lock_path(root)))["run_id"] == "1" * 32
    assert "was taken over by another run" in capsys.readouterr().err


def test_gcs_requests_carry_the_generation_preconditions(gcs_bucket):
    server, path = gcs_bucket.server, f"{gcs_bucket.url}/out/x.lock"
    mark = server.log_size()
    token = conditional_writes.create_new(path, b"v1")
    newer = conditional_writes.replace_versioned(path, b"v2", token)
    conditional_writes.delete_versioned(path, newer)
    with open(server.log_path, "rb") as f:
        f.seek(mark)
        log = f.read().decode()
    assert re.search(r'POST /upload/\S+ifGenerationMatch=0\b', log), log
    assert re.search(rf'POST /upload/\S+ifGenerationMatch={token}\b', log), log
    assert re.search(rf'DELETE /storage/v1/b/{gcs_bucket.name}/o/out%2Fx.lock\?\S*'
                     rf'ifGenerationMatch={newer}\b', log), log
