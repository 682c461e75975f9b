"""Unit tests of etl/core/io/storage.py, the one seam to files: the same contract on a
local disk and on a real GCS server (fake-gcs-server, started by the tests)."""

from __future__ import annotations

import base64
import hashlib
import os

import numpy as np
import pytest

from etl.core.io import storage
from tests.gcs_server import objects

# A name with every character that trips a glob, a URL or an ASCII assumption.
ODD_NAME = "a b#c[1]?*é.bin"


def test_write_appears_whole_with_its_size_and_sha256(root):
    path = storage.join(root, "sub", ODD_NAME)
    with storage.write(path) as out:
        out.write(b"hello ")
        assert storage.stat(path) is None  # Nothing at the name before the end.
        out.write(b"world")
    assert storage.read_bytes(path) == b"hello world"
    assert (out.size, out.sha256) == (11, hashlib.sha256(b"hello world").hexdigest())
    assert storage.sha256(path) == out.sha256


def test_write_that_fails_leaves_the_old_file_and_nothing_else(root):
    path = storage.join(root, "f.txt")
    storage.write_text(path, "old")
    with pytest.raises(RuntimeError), storage.write(path) as out:
        out.write(b"half of the new")
        raise RuntimeError("killed mid-write")
    assert storage.read_text(path) == "old"
    assert storage.relative_files(root) == ["f.txt"]


def test_a_failed_first_write_leaves_no_file(root):
    with pytest.raises(RuntimeError), storage.write(storage.join(root, "new")) as out:
        out.write(b"x" * 100)
        raise RuntimeError("stop")
    assert storage.list_files(root) == []


def test_empty_file_is_written_and_read(root):
    path = storage.join(root, "empty")
    storage.write_bytes(path, b"")
    assert storage.read_bytes(path) == b""
    assert storage.read_bytes(path, 100) == b""
    assert storage.stat(path).size == 0


@pytest.mark.parametrize("limit", [0, 4095, 4096, 5000, 9_999, 10_000, 20_000])
def test_read_bytes_stops_one_byte_past_the_limit(root, limit, monkeypatch):
    monkeypatch.setattr(storage, "READ_CHUNK_BYTES", 4096)
    data = np.random.default_rng(limit).integers(0, 256, 10_000, np.uint8).tobytes()
    path = storage.join(root, ODD_NAME)
    storage.write_bytes(path, data)
    assert storage.read_bytes(path, limit) == data[:limit + 1]
    assert storage.read_bytes(path) == data


def test_read_bytes_of_a_missing_file_is_file_not_found(root):
    with pytest.raises(FileNotFoundError):
        storage.read_bytes(storage.join(root, "absent"), 10)


def test_local_read_bytes_never_asks_for_more_than_a_chunk(tmp_path, monkeypatch):
    # f.read(n) allocates n bytes up front: asking for --max_file_mb at once cost a
    # 64 MiB allocation per image.
    (tmp_path / "f").write_bytes(b"y" * 3000)
    requested = []
    real_open = storage.open_read

    class Recording:
        def __init__(self, f):
            self._f = f

        def read(self, n=-1):
            requested.append(n)
            return self._f.read(n)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self._f.close()

    monkeypatch.setattr(storage, "open_read", lambda *a, **k: Recording(real_open(*a, **k)))
    assert storage.read_bytes(str(tmp_path / "f"), 64 << 20) == b"y" * 3000
    assert requested and max(requested) == storage.READ_CHUNK_BYTES


def test_stat_gives_size_and_mtime_or_none(root):
    path = storage.join(root, ODD_NAME)
    storage.write_bytes(path, b"12345")
    found = storage.stat(path)
    assert (found.path, found.size) == (path, 5) and found.mtime > 1e9
    assert storage.stat(storage.join(root, "absent")) is None
    assert storage.exists(path) and not storage.exists(storage.join(root, "absent"))


def test_list_files_is_recursive_sorted_and_prefix_exact(root):
    for name in ("b/2.txt", "a/1.txt", f"a/{ODD_NAME}", "c.txt"):
        storage.write_text(storage.join(root, name), name)
    # A sibling whose name starts like the folder is not under it.
    storage.write_text(root + "2/x.txt", "elsewhere")
    assert storage.relative_files(root) == sorted(
        ["a/1.txt", f"a/{ODD_NAME}", "b/2.txt", "c.txt"])
    assert [info.size for info in storage.list_files(storage.join(root, "b"))] == [7]
    assert storage.subfolders(root) == ["a", "b"]
    assert storage.subfolders(storage.join(root, "nothing")) == []
    assert storage.is_folder(root) and storage.is_folder(storage.join(root, "a"))
    assert not storage.is_folder(storage.join(root, "nothing"))
    assert storage.list_files(storage.join(root, "nothing")) == []


def test_an_object_named_like_a_folder_is_not_a_file(monkeypatch):
    # What a cloud console makes for an empty "folder": an object "a/b/" (the local
    # GCS server keeps no such object, so the listing is given here).
    from apache_beam.io.filesystem import FileMetadata, MatchResult
    from apache_beam.io.filesystems import FileSystems

    listed = [FileMetadata("gs://b/in/cat/", 0, 1.0), FileMetadata("gs://b/in/cat/1.jpg", 5, 2.0)]
    monkeypatch.setattr(FileSystems, "match", lambda patterns, limits=None: [
        MatchResult(patterns[0], listed)])
    assert storage.list_files("gs://b/in") == [storage.FileInfo("gs://b/in/cat/1.jpg", 5, 2.0)]


def test_a_folder_whose_name_holds_glob_characters_lists_only_itself(root):
    folder = storage.join(root, "photos [2024]?")
    storage.write_text(storage.join(folder, "cat", "1.jpg"), "1")
    storage.write_text(storage.join(root, "photos 2", "cat", "2.jpg"), "2")
    assert storage.relative_files(folder) == ["cat/1.jpg"]
    [listed] = storage.list_tree(folder)
    assert (listed.path, listed.info.size) == (storage.join(folder, "cat", "1.jpg"), 1)


def test_glob_matches_a_users_pattern(root):
    for name in ("x/1.csv", "x/2.csv", "x/notes.txt"):
        storage.write_text(storage.join(root, name), "a")
    assert [info.path for info in storage.glob(storage.join(root, "x", "*.csv"))] == [
        storage.join(root, "x", "1.csv"), storage.join(root, "x", "2.csv")]


def test_rename_replaces_the_destination_and_removes_the_source(root):
    source, destination = storage.join(root, ODD_NAME), storage.join(root, "d", "final")
    storage.write_text(destination, "old")
    storage.write_text(source, "new")
    storage.rename(source, destination)
    assert storage.read_text(destination) == "new"
    assert storage.relative_files(root) == ["d/final"]


def test_delete_removes_exactly_the_named_file(root):
    # "[1]" as a glob would match "1"; the file "[1]" must go and "1" stay.
    storage.write_text(storage.join(root, "[1]"), "a")
    storage.write_text(storage.join(root, "1"), "b")
    storage.delete(storage.join(root, "[1]"))
    storage.delete(storage.join(root, "never was"))
    assert storage.relative_files(root) == ["1"]


def test_delete_tree_removes_everything_under_the_folder_only(root):
    for name in ("t/a", "t/b/c", "t2/keep"):
        storage.write_text(storage.join(root, name), name)
    assert storage.delete_tree(storage.join(root, "t")) == 2
    assert storage.delete_tree(storage.join(root, "t")) == 0
    assert storage.relative_files(root) == ["t2/keep"]


def test_copy_tree_copies_across_filesystems(root, tmp_path):
    local = tmp_path / "src"
    (local / "assets").mkdir(parents=True)
    (local / "assets" / "vocab").write_bytes(b"cat\ndog\n")
    (local / "model.pb").write_bytes(b"\x00\x01")
    destination = storage.join(root, "copy")
    assert storage.copy_tree(str(local), destination) == ["assets/vocab", "model.pb"]
    back = tmp_path / "back"
    assert storage.copy_tree(destination, str(back)) == ["assets/vocab", "model.pb"]
    assert (back / "assets" / "vocab").read_bytes() == b"cat\ndog\n"
    assert (back / "model.pb").read_bytes() == b"\x00\x01"


def test_local_write_keeps_no_temporary_file(tmp_path):
    path = str(tmp_path / "f")
    storage.write_text(path, "x")
    assert os.listdir(tmp_path) == ["f"]


def test_gcs_small_files_are_one_request_each(gcs_bucket):
    # No bucket lookups beside them either: google-cloud-storage's lookups for
    # OpenTelemetry spans are off (etl/core/io/gcs.py), as its tracing is.
    server = gcs_bucket.server
    path = f"{gcs_bucket.url}/photo.jpg"
    mark = server.log_size()
    storage.write_bytes(path, b"j" * 5000)
    assert storage.read_bytes(path, 1 << 20) == b"j" * 5000
    assert storage.stat(path).size == 5000
    storage.delete(path)
    assert server.requests(mark) == {"upload": 1, "media_get": 1, "metadata_get": 1,
                                     "delete": 1}


def test_gcs_write_is_one_object_as_the_server_reports_it(gcs_bucket):
    data = bytes(range(256)) * 10
    with storage.write(f"{gcs_bucket.url}/d/x.bin") as out:
        out.write(data)
    (name, blob), = objects(gcs_bucket.server, gcs_bucket.name).items()
    assert (name, blob.size) == ("d/x.bin", len(data))
    assert blob.md5_hash == base64.b64encode(hashlib.md5(data).digest()).decode()
