"""The output folder, end to end: a user's folder is refused and left as it was, a
file where the folder should be is one line, and a given --tft_temp_dir's other
contents survive the run. (--overwrite keeping the user's files:
tests/pipelines/test_images.py.)"""

from __future__ import annotations

import hashlib
import os

import pytest

from pipelines import common, images, runner_defaults, timeseries
from tests import image_fixtures
from tests.job_runs import (
    TEST_IMAGE_SIZE,
    files_under,
    run_main,
)
from tests.series_fixtures import series_rows, write_jsonl

# The case found: an ML project's data/ folder with train/, test/ and tmp/.
USERS_FILES = {"train/mine.txt": b"mine", "train/old-shard.tfrecord.gz": b"shard",
               "test/a.jpg": b"jpeg", "tmp/scratch.bin": b"scratch"}


@pytest.fixture(scope="module")
def image_input(tmp_path_factory) -> str:
    root = str(tmp_path_factory.mktemp("images_in"))
    image_fixtures.write_image_folder(root, copies=1)
    return root


def _plant(root, files: dict[str, bytes]) -> dict[str, str]:
    for relpath, data in files.items():
        path = os.path.join(root, relpath)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(data)
    return _digests(root)


def _digests(root) -> dict[str, str]:
    digests = {}
    for relpath in files_under(str(root)):
        with open(os.path.join(root, relpath), "rb") as f:
            digests[relpath] = hashlib.sha256(f.read()).hexdigest()
    return digests


@pytest.mark.parametrize("overwrite", [[], ["--overwrite"]])
def test_image_job_refuses_a_users_folder_and_changes_nothing(image_input, tmp_path,
                                                              monkeypatch, overwrite):
    out = tmp_path / "data"
    before = _plant(out, USERS_FILES)
    exit_error = run_main(monkeypatch, images.run, [
        f"--input={image_input}", f"--output_dir={out}",
        f"--image_size={TEST_IMAGE_SIZE}", *overwrite])
    assert exit_error.code == (
        f"error: --output_dir {str(out)!r} holds files this job did not write (test/, "
        f"tmp/, train/): neither a dataset of ours nor an interrupted run's. Nothing in "
        f"it was changed; give a new or empty folder.")
    assert _digests(out) == before


def test_timeseries_job_refuses_a_users_folder_and_changes_nothing(tmp_path, monkeypatch):
    path = str(tmp_path / "rows.jsonl")
    write_jsonl(path, series_rows("a", range(40)) + series_rows("b", range(40)))
    out = tmp_path / "data"
    before = _plant(out, USERS_FILES)
    exit_error = run_main(monkeypatch, timeseries.run, [
        f"--input={path}", f"--output_dir={out}", "--window_size=4", "--overwrite"])
    assert exit_error.code.startswith(f"error: --output_dir {str(out)!r} holds files this "
                                      f"job did not write")
    assert _digests(out) == before


def test_a_file_where_the_output_folder_should_be_is_one_line(image_input, tmp_path,
                                                              monkeypatch, capsys):
    out = tmp_path / "out"
    out.write_bytes(b"mine")
    exit_error = run_main(monkeypatch, images.run, [
        f"--input={image_input}", f"--output_dir={out}", f"--image_size={TEST_IMAGE_SIZE}"])
    assert exit_error.code == (f"error: --output_dir {str(out)!r} is a file, not a "
                               f"folder; give a folder (new, empty, or one holding a "
                               f"dataset of ours).")
    assert "Traceback" not in capsys.readouterr().err
    assert out.read_bytes() == b"mine"


def test_a_given_tft_temp_dir_gets_a_run_folder_inside_it_and_only_that_is_removed(
        tmp_path):
    scratch = tmp_path / "scratch"
    before = _plant(scratch, {"mine.txt": b"mine", "tmp/x": b"x"})
    out = str(tmp_path / "out")
    options = common.DatasetOptions([f"--output_dir={out}", f"--tft_temp_dir={scratch}"])
    settings = common.OutputSettings.from_options(options, "images")
    name = "tfrecord-etl-" + hashlib.sha256(out.encode()).hexdigest()[:16]
    assert settings.tft_temp_dir == f"{scratch}/{name}"
    _plant(settings.tft_temp_dir, {"transform_output/a": b"a", "series/b": b"b"})
    runner_defaults.remove_temp_dir(settings.tft_temp_dir)
    assert _digests(scratch) == before
    assert sorted(os.listdir(scratch)) == ["mine.txt", "tmp"]
