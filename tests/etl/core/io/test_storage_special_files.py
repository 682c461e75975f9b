"""Unit tests of etl/core/io/storage.py's guards for reads that could block: anything but
a regular file is refused unopened, and a read given a time limit is given up."""

from __future__ import annotations

import os

import pytest

from etl.core.io import storage
from tests.special_files import freeing_blocked_readers, make_fifo, make_socket


def test_open_read_refuses_a_fifo_unopened_naming_it(tmp_path):
    fifo = make_fifo(tmp_path / "fifo.jpg")  # No writer: opening it would wait forever.
    with freeing_blocked_readers([fifo]) as freed:
        with pytest.raises(storage.NotARegularFile) as refused:
            storage.read_bytes(fifo, 10)
    assert not freed
    assert str(refused.value) == (f"{fifo!r} is a FIFO (named pipe), not a regular file: "
                                  f"not opened (reading one can block forever or never end)")
    # An OSError like any unreadable file, and a ValueError: a user's input to fix.
    assert isinstance(refused.value, OSError) and isinstance(refused.value, ValueError)


def test_open_read_refuses_a_socket_and_a_device(tmp_path):
    sock = make_socket(tmp_path / "sock.png")
    with pytest.raises(storage.NotARegularFile, match="is a socket, not a regular file"):
        storage.open_read(sock)
    with pytest.raises(storage.NotARegularFile, match="is a character device"):
        storage.read_bytes("/dev/zero", 10)  # Would never end.


def test_a_fifo_swapped_in_after_the_stat_is_refused_without_blocking(tmp_path,
                                                                      monkeypatch):
    fifo = make_fifo(tmp_path / "fifo.jpg")
    regular = os.stat(__file__)
    real_stat = os.stat
    # The path still looked like a file when stat saw it.
    monkeypatch.setattr(os, "stat", lambda path, *a, **k: regular if str(path) == fifo
                        else real_stat(path, *a, **k))
    with freeing_blocked_readers([fifo]) as freed:
        with pytest.raises(storage.NotARegularFile, match="is a FIFO"):
            storage.read_bytes(fifo)
    assert not freed


def test_a_folder_and_a_missing_file_fail_as_opening_them_does(tmp_path):
    with pytest.raises(IsADirectoryError, match=r"^\[Errno 21\] Is a directory: "):
        storage.read_bytes(str(tmp_path))
    with pytest.raises(FileNotFoundError, match=r"^\[Errno 2\] No such file"):
        storage.open_read(str(tmp_path / "absent"))


def test_special_kind_names_what_a_path_is_by_stat(tmp_path):
    (tmp_path / "file").write_bytes(b"x")
    assert [storage.special_kind(p) for p in (
        make_fifo(tmp_path / "fifo"), make_socket(tmp_path / "sock"), "/dev/null",
        str(tmp_path), str(tmp_path / "file"), str(tmp_path / "absent"), "gs://b/x")] == [
        "FIFO (named pipe)", "socket", "character device", "folder", None, None, None]
