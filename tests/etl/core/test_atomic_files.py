"""Unit tests of etl/core/atomic_files.py: a file appears whole or not at all."""

from __future__ import annotations

import pytest

from etl.core import atomic_files


def test_atomic_path_publishes_only_when_the_block_succeeds(tmp_path):
    path = str(tmp_path / "sub" / "out.txt")
    with atomic_files.atomic_path(path) as tmp:
        assert tmp == path + ".incomplete"
        with open(tmp, "w") as f:
            f.write("done")
        assert not (tmp_path / "sub" / "out.txt").exists()
    assert (tmp_path / "sub" / "out.txt").read_text() == "done"
    assert not (tmp_path / "sub" / "out.txt.incomplete").exists()


def test_atomic_path_leaves_the_old_file_and_no_temp_on_error(tmp_path):
    path = tmp_path / "out.txt"
    path.write_text("old")
    with pytest.raises(RuntimeError), atomic_files.atomic_path(str(path)) as tmp:
        with open(tmp, "w") as f:
            f.write("half")
        raise RuntimeError("writer died")
    assert path.read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.txt"]


def test_write_text_atomically_replaces_the_file(tmp_path):
    path = tmp_path / "m.json"
    path.write_text("old")
    atomic_files.write_text_atomically(str(path), "new\n")
    assert path.read_text() == "new\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.json"]
