"""Unit tests of etl/core/output_dir.py prepare_output_dir."""

from __future__ import annotations

import os

import pytest

from etl.core import output_dir

OWNED = ("train", "validation", "test", "transform_fn", "transformed_metadata", "metadata",
         "errors", "tmp", "transform_tmp", "progress", "keys")


def _populate(root, *, manifest: bool) -> None:
    """A previous run's files under ``root`` plus files that belong to the user."""
    for name in OWNED:
        (root / name / "sub").mkdir(parents=True)
        (root / name / "sub" / "file.bin").write_bytes(b"old")
    (root / "train" / "images-train-00000-of-00001.tfrecord.gz").write_bytes(b"stale")
    if manifest:
        (root / "manifest.json").write_text("{}")
    (root / "NOTES.md").write_text("mine")
    (root / "my_analysis").mkdir()
    (root / "my_analysis" / "plot.png").write_bytes(b"png")


def _entries(root) -> list[str]:
    return sorted(os.listdir(root))


def test_prepare_output_dir_refuses_finished_dataset(tmp_path):
    _populate(tmp_path, manifest=True)
    with pytest.raises(ValueError, match="--overwrite") as info:
        output_dir.prepare_output_dir(str(tmp_path), overwrite=False)
    assert "manifest.json exists" in str(info.value)


def test_prepare_output_dir_refusal_leaves_everything_in_place(tmp_path):
    _populate(tmp_path, manifest=True)
    before = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*"))
    with pytest.raises(ValueError):
        output_dir.prepare_output_dir(str(tmp_path), overwrite=False)
    assert sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*")) == before


def test_prepare_output_dir_overwrite_removes_manifest_and_owned_entries(tmp_path):
    _populate(tmp_path, manifest=True)
    output_dir.prepare_output_dir(str(tmp_path), overwrite=True)
    assert _entries(tmp_path) == ["NOTES.md", "my_analysis"]


def test_prepare_output_dir_overwrite_keeps_user_files_intact(tmp_path):
    _populate(tmp_path, manifest=True)
    output_dir.prepare_output_dir(str(tmp_path), overwrite=True)
    assert (tmp_path / "NOTES.md").read_text() == "mine"
    assert (tmp_path / "my_analysis" / "plot.png").read_bytes() == b"png"


def test_prepare_output_dir_without_resume_clears_unfinished_run(tmp_path):
    _populate(tmp_path, manifest=False)
    output_dir.prepare_output_dir(str(tmp_path), overwrite=False, resume_run=False)
    assert _entries(tmp_path) == ["NOTES.md", "my_analysis"]


def test_prepare_output_dir_resuming_keeps_shards_and_progress_only(tmp_path):
    # The run itself decides which shards it keeps (etl/core/resume.py); everything
    # else an unfinished run left is cleared before it starts.
    _populate(tmp_path, manifest=False)
    output_dir.prepare_output_dir(str(tmp_path), overwrite=False)
    assert _entries(tmp_path) == ["NOTES.md", "my_analysis", "progress", "test", "train",
                                  "validation"]
    assert (tmp_path / "train" / "images-train-00000-of-00001.tfrecord.gz").exists()


def test_prepare_output_dir_overwrite_never_resumes(tmp_path):
    _populate(tmp_path, manifest=True)
    output_dir.prepare_output_dir(str(tmp_path), overwrite=True, resume_run=True)
    assert _entries(tmp_path) == ["NOTES.md", "my_analysis"]


def test_prepare_output_dir_creates_missing_dir(tmp_path):
    target = tmp_path / "a" / "b"
    output_dir.prepare_output_dir(str(target), overwrite=False)
    assert target.is_dir()
    assert _entries(target) == []


def test_prepare_output_dir_accepts_empty_existing_dir(tmp_path):
    output_dir.prepare_output_dir(str(tmp_path), overwrite=True)
    assert _entries(tmp_path) == []


def test_prepare_output_dir_owned_entries_cover_the_layout():
    assert set(output_dir.OWNED_ENTRIES) == set(OWNED)
