"""One run per output folder: a lock file created atomically, held with a lease.

A run creates ``<output_dir>/.tfrecord-etl.lock`` before it changes anything there,
with an atomic create-if-absent (``O_EXCL`` on a disk, ``ifGenerationMatch=0`` on
GCS: ``conditional_writes.create_new``), so of two runs started together exactly one holds it.
The file names its holder (host, pid, start time) and when it last renewed its
lease; a thread renews it every ``lease_s / 4`` while the run goes on, and the run
deletes it at the end, whatever the end.

A run that finds the lock held refuses in one line naming the holder. A lock whose
holder is gone is taken over, said in one line: gone means its process no longer
exists (a holder on this host), or its lease ran out without a renewal (any host:
the only sign a killed run on another machine leaves). Taking over deletes exactly
the version of the lock judged stale (``conditional_writes.delete_versioned``), then creates
a new one atomically, so two runs taking over the same stale lock cannot both win.
"""

from __future__ import annotations

import dataclasses
import json
import os
import socket
import sys
import threading
import time
import uuid
from typing import Any

from etl.core.io import conditional_writes, storage

LOCK_FILENAME = ".tfrecord-etl.lock"
# How long a holder may go without renewing before its lock is stale. Renewed every
# quarter of it, so a run survives three missed renewals (a slow bucket); long enough
# for clocks of different hosts that disagree by a minute.
DEFAULT_LEASE_S = 300.0
LEASE_ENV = "ETL_LOCK_LEASE_S"  # Overrides the lease (tests of a lapsed lease).


def _say(line: str) -> None:
    print(f"[lock] {line}", file=sys.stderr, flush=True)


def lock_path(output_dir: str) -> str:
    return storage.join(output_dir, LOCK_FILENAME)


def lease_seconds() -> float:
    text = os.environ.get(LEASE_ENV)
    return float(text) if text else DEFAULT_LEASE_S


@dataclasses.dataclass(frozen=True)
class Holder:
    """Who holds a lock, as its file says: the run's id, host, process and start time
    (UTC, ISO 8601), and its lease (seconds since the epoch of the last renewal, and
    how long the lease lasts)."""

    run_id: str
    host: str
    pid: int
    started: str
    renewed: float
    lease_s: float

    def to_bytes(self) -> bytes:
        return json.dumps(dataclasses.asdict(self), sort_keys=True).encode()

    @classmethod
    def from_bytes(cls, data: bytes) -> Holder | None:
        try:
            fields = json.loads(data)
            return cls(str(fields["run_id"]), str(fields["host"]), int(fields["pid"]),
                       str(fields["started"]), float(fields["renewed"]),
                       float(fields["lease_s"]))
        except (ValueError, KeyError, TypeError):
            return None  # Half written by a killed run, or not ours.

    def describe(self) -> str:
        return f"host {self.host}, pid {self.pid}, started {self.started}"


def _process_exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # Someone else's process.
    return True


def why_stale(holder: Holder | None, now: float) -> str | None:
    """Why ``holder``'s lock may be taken over, in words; None while it is held."""
    if holder is None:
        return "its lock file is unreadable"
    if holder.host == socket.gethostname() and not _process_exists(holder.pid):
        return "its process no longer exists"
    if now - holder.renewed > holder.lease_s:
        return (f"its lease ran out {now - holder.renewed - holder.lease_s:.0f} s ago "
                f"(not renewed for {now - holder.renewed:.0f} s)")
    return None


class LockHeldError(ValueError):
    """Another run holds the output folder (a ValueError: one ``error:`` line)."""


class RunLock:
    """The held lock of one run: renewed by a thread until :meth:`release`.

    Usage::

        lock = RunLock.acquire(output_dir)
        try:
            ...  # the run
        finally:
            lock.release()
    """

    def __init__(self, path: str, holder: Holder, token: str) -> None:
        self.path = path
        self.holder = holder
        self._token = token
        self._lost = False
        self._stop = threading.Event()
        self._guard = threading.Lock()
        self._thread = threading.Thread(target=self._renew_until_released,
                                        name="run-lock-renewal", daemon=True)
        self._thread.start()

    @classmethod
    def acquire(cls, output_dir: str, lease_s: float | None = None) -> RunLock:
        """Takes ``output_dir``'s lock, taking over a stale one (said in one line).

        Raises:
            LockHeldError: if another live run holds it.
            OSError: if the lock file cannot be written.
        """
        path = lock_path(output_dir)
        lease = lease_seconds() if lease_s is None else lease_s
        now = time.time()
        holder = Holder(run_id=uuid.uuid4().hex, host=socket.gethostname(),
                        pid=os.getpid(),
                        started=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now)),
                        renewed=now, lease_s=lease)
        for _ in range(3):  # A lock released or taken over between two looks: again.
            token = conditional_writes.create_new(path, holder.to_bytes())
            if token is not None:
                return cls(path, holder, token)
            found = conditional_writes.read_versioned(path)
            if found is None:
                continue
            other = Holder.from_bytes(found.data)
            why = why_stale(other, time.time())
            if why is None:
                raise LockHeldError(
                    f"--output_dir {output_dir!r} is in use by another run "
                    f"({other.describe()}); it is not changed. Wait for that run "
                    f"to end or choose another --output_dir (a killed run's lock is "
                    f"taken over once its process is gone or its {other.lease_s:.0f} s "
                    f"lease runs out; the lock is {path}).")
            if conditional_writes.delete_versioned(path, found.token):
                _say(f"taking over {output_dir} from an earlier run "
                     f"({other.describe() if other else 'unknown holder'}): {why}.")
        raise LockHeldError(f"--output_dir {output_dir!r}: could not take its lock "
                            f"{path}, which other runs keep taking; try again.")

    def _renew_until_released(self) -> None:
        interval = max(self.holder.lease_s / 4, 0.05)
        while not self._stop.wait(interval):
            self.renew()

    def renew(self) -> None:
        """Writes a new renewal time, if the lock is still this run's."""
        with self._guard:
            if self._lost or self._stop.is_set():
                return
            renewed = dataclasses.replace(self.holder, renewed=time.time())
            try:
                token = conditional_writes.replace_versioned(self.path, renewed.to_bytes(),
                                                  self._token)
            except OSError as e:  # A slow or failing store: the next renewal retries.
                _say(f"could not renew {self.path} ({e}); retrying.")
                return
            if token is None:
                self._lost = True
                _say(f"{self.path} was taken over by another run: this run's lease "
                     f"had run out. Its output may be mixed with that run's; rerun "
                     f"once that one has ended.")
                return
            self.holder, self._token = renewed, token

    def release(self) -> None:
        """Stops renewing and deletes the lock, if it is still this run's."""
        with self._guard:
            self._stop.set()
            if not self._lost:
                conditional_writes.delete_versioned(self.path, self._token)
        self._thread.join()

    def __enter__(self) -> RunLock:
        return self

    def __exit__(self, *unused: Any) -> None:
        self.release()
