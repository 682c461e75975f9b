"""Unit tests of the image shard step's read (etl/images/batches.py ``load_record``):
a FIFO, socket or device and a read that stalls become dead letters, never a wait."""

from __future__ import annotations

import threading

from etl.core import dead_letters
from etl.core.dead_letters import Rejection
from etl.core.io import storage
from etl.images import loading
from etl.images.batches import Loaded, load_record
from etl.images.sources import ImageRecord
from tests.image_fixtures import _encode
from tests.special_files import freeing_blocked_readers, make_fifo, make_socket

LIMITS = loading.InputLimits()


def _record(path: str) -> ImageRecord:
    return ImageRecord(key=path.rsplit("/", 1)[-1], uri=path, label="cat", split="train")


def test_load_record_rejects_a_fifo_a_socket_and_a_device_unopened(tmp_path):
    fifo = make_fifo(tmp_path / "fifo.jpg")
    sock = make_socket(tmp_path / "sock.png")
    with freeing_blocked_readers([fifo]) as freed:
        results = [load_record(_record(path), LIMITS, read_timeout_s=60)
                   for path in (fifo, sock, "/dev/zero")]
    assert not freed
    refused = "not a regular file: not opened (reading one can block forever or never end)"
    assert [(r.key, r.reason, r.message) for r in results] == [
        ("fifo.jpg", dead_letters.NOT_A_REGULAR_FILE,
         f"{fifo!r} is a FIFO (named pipe), {refused}"),
        ("sock.png", dead_letters.NOT_A_REGULAR_FILE, f"{sock!r} is a socket, {refused}"),
        ("zero", dead_letters.NOT_A_REGULAR_FILE,
         f"'/dev/zero' is a character device, {refused}")]

def test_load_record_gives_up_a_stalled_read_as_read_timed_out(tmp_path, monkeypatch):
    path = tmp_path / "slow.png"
    path.write_bytes(_encode("png", 5, 7, (1, 2, 3)))
    released = threading.Event()
    real_open = storage.open_read

    def stalled_open(uri):  # A hung mount: the open returns once released.
        released.wait()
        return real_open(uri)

    monkeypatch.setattr(storage, "open_read", stalled_open)
    try:
        rejected = load_record(_record(str(path)), LIMITS, read_timeout_s=0.1)
    finally:
        released.set()
    assert isinstance(rejected, Rejection)
    assert rejected.reason == dead_letters.READ_TIMED_OUT
    assert rejected.message == (f"Reading {str(path)!r} did not finish within 0.1 s: given "
                                f"up (--read_timeout_s; a stalled mount or device?)")
    monkeypatch.setattr(storage, "open_read", real_open)
    # The same file, read in time, loads as it does without a limit.
    loaded = load_record(_record(str(path)), LIMITS, read_timeout_s=60)
    assert isinstance(loaded, Loaded)
    assert loaded == load_record(_record(str(path)), LIMITS)
