"""Unit tests of etl/core/run/output_dir.py: a folder is the user's until proven ours."""

from __future__ import annotations

import json
import os

import pytest

from etl.core.run import output_dir

SHARD = "images-train-00000-of-00001.tfrecord.gz"
# A dataset of ours: what a run writes, by relative path.
OURS = (f"train/{SHARD}", "train/images-train-pending-00001.tfrecord.gz.incomplete",
        "validation/images-validation-00000-of-00001.tfrecord.gz",
        "transform_fn/saved_model.pb", "transform_fn/assets/vocab", "metadata/schema.pbtxt",
        "transformed_metadata/schema.pbtxt", "errors/rejected.jsonl", "keys/keys.txt",
        "statistics/train.tfrecord", "report/index.html", "duplicates/pairs.jsonl",
        "tmp/transform_output/x", "transform_tmp/y", "progress/shards/train-00000.json")
# The user's files beside it, some in folders named like ours.
THEIRS = ("NOTES.md", "my_analysis/plot.png", "train/notes.txt", "train/raw/cat.jpg",
          "test/old-shard.tfrecord.gz")
MANIFEST = {"format_version": 1, "kind": "images", "splits": {}}


def _write(root, relpaths, text: str = "x") -> None:
    for relpath in relpaths:
        path = root / relpath
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def _files(root) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


def _dataset(root) -> None:
    _write(root, OURS)
    _write(root, THEIRS, "mine")
    (root / "manifest.json").write_text(json.dumps(MANIFEST))


def _interrupted(root) -> None:
    _write(root, OURS)
    _write(root, THEIRS, "mine")
    _write(root, [output_dir.OWNER_RECORD_RELPATH])


def test_prepare_output_dir_refuses_a_users_folder_named_like_ours(tmp_path):
    # The case found: data/ of raw files with train/, test/ and tmp/ folders.
    _write(tmp_path, ["train/mine.txt", f"train/{SHARD}", "train/old-shard.tfrecord.gz",
                      "test/a.jpg", "tmp/scratch"], "mine")
    before = _files(tmp_path)
    for overwrite in (False, True):
        with pytest.raises(ValueError) as refused:
            output_dir.prepare_output_dir(str(tmp_path), overwrite=overwrite)
        assert str(refused.value) == (
            f"--output_dir {str(tmp_path)!r} holds files this job did not write (test/, "
            f"tmp/, train/): neither a dataset of ours nor an interrupted run's. Nothing "
            f"in it was changed; give a new or empty folder.")
    assert _files(tmp_path) == before


def test_prepare_output_dir_refusal_names_five_entries_then_counts(tmp_path):
    _write(tmp_path, [f"f{i}.txt" for i in range(8)])
    with pytest.raises(ValueError, match=r"\(f0.txt, f1.txt, f2.txt, f3.txt, f4.txt and "
                                         r"3 more\)"):
        output_dir.prepare_output_dir(str(tmp_path), overwrite=True)


def test_prepare_output_dir_refuses_a_manifest_that_is_not_ours(tmp_path):
    (tmp_path / "manifest.json").write_text('{"files": ["a.csv"]}')
    with pytest.raises(ValueError, match=r"a manifest\.json that is not one of ours"):
        output_dir.prepare_output_dir(str(tmp_path), overwrite=True)
    assert _files(tmp_path) == ["manifest.json"]


def test_prepare_output_dir_refuses_finished_dataset(tmp_path):
    _dataset(tmp_path)
    before = _files(tmp_path)
    with pytest.raises(ValueError, match="--overwrite") as info:
        output_dir.prepare_output_dir(str(tmp_path), overwrite=False)
    assert "manifest.json exists" in str(info.value)
    assert _files(tmp_path) == before


def test_prepare_output_dir_overwrite_removes_ours_and_keeps_theirs(tmp_path, capsys):
    _dataset(tmp_path)
    output_dir.prepare_output_dir(str(tmp_path), overwrite=True, resume_run=True)
    assert _files(tmp_path) == sorted([*THEIRS, output_dir.OWNER_RECORD_RELPATH])
    for relpath in THEIRS:
        assert (tmp_path / relpath).read_text() == "mine"
    assert capsys.readouterr().err == (
        f"[output] --overwrite: removed the dataset in {tmp_path}: manifest.json, "
        f"duplicates/ (1 file), errors/ (1 file), keys/ (1 file), metadata/ (1 file), "
        f"progress/ (1 file), report/ (1 file), statistics/ (1 file), tmp/ (1 file), "
        f"train/ (2 files), transform_fn/ (2 files), transform_tmp/ (1 file), "
        f"transformed_metadata/ (1 file), validation/ (1 file); kept what is not ours: "
        f"NOTES.md, my_analysis/.\n")


def test_prepare_output_dir_without_resume_clears_only_our_leftovers(tmp_path):
    _interrupted(tmp_path)
    output_dir.prepare_output_dir(str(tmp_path), overwrite=False, resume_run=False)
    assert _files(tmp_path) == sorted([*THEIRS, output_dir.OWNER_RECORD_RELPATH])


def test_prepare_output_dir_resuming_keeps_shards_and_progress(tmp_path):
    # The run itself decides which shards it keeps (etl/core/run/resume.py).
    _interrupted(tmp_path)
    output_dir.prepare_output_dir(str(tmp_path), overwrite=False)
    kept = [r for r in OURS if r.split("/")[0] in ("train", "validation", "progress")]
    assert _files(tmp_path) == sorted([*THEIRS, *kept, output_dir.OWNER_RECORD_RELPATH])


def test_prepare_output_dir_takes_an_older_runs_fingerprint_as_ours(tmp_path):
    _write(tmp_path, [f"train/{SHARD}", "progress/fingerprint.json"])
    output_dir.prepare_output_dir(str(tmp_path), overwrite=False, resume_run=False)
    assert _files(tmp_path) == [output_dir.OWNER_RECORD_RELPATH]


def test_prepare_output_dir_creates_missing_dir_with_its_owner_record(tmp_path):
    target = tmp_path / "a" / "b"
    output_dir.prepare_output_dir(str(target), overwrite=False)
    assert _files(target) == [output_dir.OWNER_RECORD_RELPATH]
    assert output_dir.inspect(str(target)).kind == output_dir.INTERRUPTED


def test_prepare_output_dir_accepts_empty_existing_dir(tmp_path):
    assert output_dir.inspect(str(tmp_path)).kind == output_dir.EMPTY
    output_dir.prepare_output_dir(str(tmp_path), overwrite=True)
    assert _files(tmp_path) == [output_dir.OWNER_RECORD_RELPATH]


def test_check_output_path_refuses_a_file_in_one_line(tmp_path):
    path = tmp_path / "out"
    path.write_text("mine")
    with pytest.raises(ValueError) as refused:
        output_dir.check_output_path(str(path))
    assert str(refused.value) == (f"--output_dir {str(path)!r} is a file, not a folder; "
                                  f"give a folder (new, empty, or one holding a dataset "
                                  f"of ours).")
    output_dir.check_output_path(str(tmp_path))
    output_dir.check_output_path(str(tmp_path / "new"))
    assert path.read_text() == "mine" and not os.path.exists(tmp_path / "new")
