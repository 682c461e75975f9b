"""Bad input, limits, accounting and interrupted runs, end to end on the image job."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import signal
import subprocess
import time

import numpy as np
import pytest
import tensorflow as tf

from etl.core import fault_injection
from pipelines import images
from reader import contract
from tests import image_fixtures
from tests.job_commands import start_job
from tests.job_runs import TEST_IMAGE_SIZE, run_images_job, run_main


def rejected_reasons(out: str) -> dict[str, str]:
    with open(os.path.join(out, contract.ERRORS_DIRNAME, contract.REJECTED_FILENAME)) as f:
        return {r["key"]: r["reason"] for r in map(json.loads, f)}


@pytest.fixture()
def small_folder(tmp_path):
    root = str(tmp_path / "in")
    good = image_fixtures.write_image_folder(root, copies=1)
    return root, good


def write_manifest(root: str, rows: list[tuple[str, str]]) -> str:
    path = os.path.join(root, "list.csv")
    with open(path, "w") as f:
        f.write("path,label\n")
        f.writelines(f"{p},{label}\n" for p, label in rows)
    return path


def test_job_above_max_error_fraction_fails_in_one_line_and_publishes_nothing(
        small_folder, tmp_path, monkeypatch, root_logging):
    root, good = small_folder
    for i in range(4):  # 4 bad of 37: 10.8% > 10%
        with open(os.path.join(root, "cat", f"bad{i}.png"), "wb") as f:
            f.write(b"not an image at all")
    out = tmp_path / "out"
    exit_error = run_main(monkeypatch, images.run, [
        f"--input={root}", f"--output_dir={out}", f"--image_size={TEST_IMAGE_SIZE}"])
    assert exit_error.code.startswith("error: 4 of 37 inputs (10.8%) were rejected")
    assert "above --max_error_fraction=0.1" in exit_error.code
    assert "\n" not in exit_error.code and "unsupported_format x4" in exit_error.code
    assert not (out / contract.MANIFEST_FILENAME).exists()
    # The dead letters are there to debug with; a higher threshold publishes.
    assert len(rejected_reasons(str(out))) == 4
    manifest = run_images_job(root, str(out), "--max_error_fraction=0.2")
    assert manifest["inputs"] == len(good) + 4
    assert manifest["rejected"]["by_reason"] == {"unsupported_format": 4}


@pytest.fixture(scope="module")
def bad_rows_run(tmp_path_factory):
    """One manifest run with a fixed vocabulary and every kind of bad row:
    (output dir, manifest, good images)."""
    tmp_path = tmp_path_factory.mktemp("bad_rows")
    root = str(tmp_path / "in")
    good = image_fixtures.write_image_folder(root, copies=1)
    outside = tmp_path / "outside.png"
    shutil.copy(os.path.join(root, good[0].key), outside)
    rows = [(g.key, g.label) for g in good]
    rows += [(good[1].key, good[1].label),       # duplicate key
             ("../outside.png", "cat"),            # escapes the manifest's folder
             (str(outside), "cat"),                # absolute path outside it
             ("cat/missing.png", "cat")]           # listed but absent
    manifest_path = write_manifest(root, rows)
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("cat\ndog\n")
    out = str(tmp_path / "out")
    manifest = run_images_job(manifest_path, out, f"--label_vocabulary={vocab}",
                              "--max_error_fraction=0.5")
    return out, manifest, good


def test_manifest_rows_duplicates_escapes_and_missing_files(bad_rows_run):
    out, manifest, good = bad_rows_run
    birds = [g for g in good if g.label == "bird"]
    assert manifest["rejected"]["by_reason"] == {
        "duplicate_key": 1, "path_outside_root": 2, "unreadable_file": 1,
        "unknown_label": len(birds)}
    reasons = rejected_reasons(out)
    assert reasons["../outside.png"] == "path_outside_root"
    assert reasons["cat/missing.png"] == "unreadable_file"
    # Exactly one row per duplicated key was written.
    written = sum(manifest["splits"][s]["num_records"] for s in contract.SPLITS)
    assert written == len(good) - len(birds)
    assert manifest["inputs"] == written + manifest["rejected"]["count"]


def test_label_outside_fixed_vocabulary_is_rejected(bad_rows_run):
    out, _, good = bad_rows_run
    birds = [g.key for g in good if g.label == "bird"]
    assert sorted(k for k, r in rejected_reasons(out).items() if r == "unknown_label") == \
        sorted(birds)


def test_allow_paths_outside_root(small_folder, tmp_path):
    root, good = small_folder
    outside = tmp_path / "elsewhere" / "x.png"
    outside.parent.mkdir()
    shutil.copy(os.path.join(root, good[0].key), outside)
    manifest_path = write_manifest(root, [(g.key, g.label) for g in good]
                                   + [("../elsewhere/x.png", "cat")])
    manifest = run_images_job(manifest_path, str(tmp_path / "out"),
                              "--allow_paths_outside_root")
    assert manifest["rejected"]["count"] == 0
    assert manifest["inputs"] == len(good) + 1


def test_symlink_out_of_the_folder_is_path_outside_root_and_never_quoted(small_folder,
                                                                        tmp_path):
    root, good = small_folder
    secret = b"root:x:0:0:SECRET-7f3a9c:/root:/bin/bash\n"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "passwd").write_bytes(secret)
    shutil.copy(os.path.join(root, good[0].key), elsewhere / "x.png")
    os.symlink(elsewhere / "passwd", os.path.join(root, "cat", "evil.jpg"))
    os.symlink(elsewhere, os.path.join(root, "dog", "linked"))  # a folder: one rejection
    out = str(tmp_path / "out")
    manifest = run_images_job(root, out)
    assert manifest["inputs"] == len(good) + 2
    assert manifest["rejected"]["by_reason"] == {"path_outside_root": 2}
    assert rejected_reasons(out) == {"cat/evil.jpg": "path_outside_root",
                                     "dog/linked": "path_outside_root"}
    with open(os.path.join(out, contract.ERRORS_DIRNAME, contract.REJECTED_FILENAME),
              "rb") as f:
        dead_letters = f.read()
    # No 6-byte run of the target file reaches the shared dead letters.
    assert not [secret[i:i + 6] for i in range(len(secret) - 5)
                if secret[i:i + 6] in dead_letters]


def test_decompression_bomb_and_oversized_file_are_refused(small_folder, tmp_path):
    root, good = small_folder
    # 12000 x 12000 pixels declared; a few hundred KB on disk.
    bomb = tf.io.encode_png(np.zeros((12000, 12000, 1), np.uint8)).numpy()
    with open(os.path.join(root, "cat", "bomb.png"), "wb") as f:
        f.write(bomb)
    big = os.path.join(root, "dog", "big.bmp")
    with open(big, "wb") as f:
        f.write(image_fixtures._encode("bmp", 400, 400, (9, 9, 9)))  # ~480 KB
    out = str(tmp_path / "out")
    manifest = run_images_job(root, out, "--max_image_pixels=1000000",
                              "--max_file_mb=0.4", "--max_error_fraction=0.5")
    reasons = rejected_reasons(out)
    assert reasons["cat/bomb.png"] == "image_too_large"
    assert reasons["dog/big.bmp"] == "file_too_large"
    assert manifest["inputs"] == len(good) + 2


def shard_digests(out: str) -> dict[str, str]:
    with open(os.path.join(out, contract.MANIFEST_FILENAME)) as f:
        manifest = json.load(f)
    return {s["path"]: s["sha256"] for split in contract.SPLITS
            for s in manifest["splits"][split]["shards"]}


def _wait_until_stopped(pid: int, timeout_s: float = 300) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
        if state == "T":
            return
        if state == "Z":
            raise AssertionError("the job exited before reaching its pause point")
        time.sleep(0.05)
    raise AssertionError(f"the job did not reach its pause point in {timeout_s} s")


def _files_under(out: str) -> list[str]:
    found = []
    for folder, _, names in os.walk(out):
        found += [os.path.relpath(os.path.join(folder, n), out) for n in names]
    return sorted(found)


# Where the job is frozen (ETL_PAUSE_AT, etl/core/fault_injection.py) and killed, and
# what must be on disk then: a shard's temporary file, a shard waiting for its final
# name, every shard final but no manifest yet.
UNFINISHED = {
    fault_injection.SHARD_WRITING: lambda p: p.endswith(".tfrecord.gz.incomplete"),
    fault_injection.SHARD_WRITTEN: lambda p: "-pending-" in p and p.endswith(".tfrecord.gz"),
    fault_injection.MANIFEST_WRITING: lambda p: "-of-" in p and p.endswith(".tfrecord.gz"),
}
KILL_FLAGS = ("--num_shards=2",)


@dataclasses.dataclass(frozen=True)
class KilledRun:
    """A job command SIGKILLed at a pause point: its output folder, the files there
    when it stopped, and whether a manifest existed after the kill."""

    out: str
    files_when_stopped: list[str]
    manifest_after_kill: bool


@pytest.fixture(scope="module")
def kill_input(tmp_path_factory: pytest.TempPathFactory) -> str:
    root = str(tmp_path_factory.mktemp("kill_input"))
    image_fixtures.write_image_folder(root, copies=1)
    return root


@pytest.fixture(scope="module")
def killed_runs(kill_input, tmp_path_factory: pytest.TempPathFactory
                ) -> dict[str, KilledRun]:
    """One command per pause point, all started at once, each killed where it froze."""
    root = tmp_path_factory.mktemp("killed")
    started = {}
    for point in UNFINISHED:
        out = str(root / point)
        started[point] = out, start_job(
            "images", f"--input={kill_input}", f"--output_dir={out}",
            f"--image_size={TEST_IMAGE_SIZE}", *KILL_FLAGS, env={fault_injection.PAUSE_ENV: point},
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    runs = {}
    try:
        for point, (out, process) in started.items():
            _wait_until_stopped(process.pid)
            files = _files_under(out)
            os.killpg(process.pid, signal.SIGKILL)  # The job and any worker it started.
            process.wait()
            runs[point] = KilledRun(out, files, os.path.exists(
                os.path.join(out, contract.MANIFEST_FILENAME)))
    finally:
        for _, process in started.values():
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
    return runs


@pytest.fixture(scope="module")
def uninterrupted_output(kill_input, tmp_path_factory: pytest.TempPathFactory) -> str:
    out = str(tmp_path_factory.mktemp("uninterrupted") / "out")
    run_images_job(kill_input, out, *KILL_FLAGS)
    return out


@pytest.mark.parametrize("point", list(UNFINISHED))
def test_sigkill_leaves_unfinished_files_and_no_manifest(killed_runs, point):
    run = killed_runs[point]
    assert [p for p in run.files_when_stopped if UNFINISHED[point](p)], run.files_when_stopped
    assert contract.MANIFEST_FILENAME not in run.files_when_stopped
    assert not run.manifest_after_kill


@pytest.mark.parametrize("point", list(UNFINISHED))
def test_rerun_after_sigkill_publishes_the_uninterrupted_dataset(
        killed_runs, uninterrupted_output, kill_input, point):
    # The next run clears the leftovers (no --overwrite needed) and publishes the same
    # dataset as an uninterrupted run, with nothing else in the output folder.
    out = killed_runs[point].out
    run_images_job(kill_input, out, *KILL_FLAGS)
    assert shard_digests(out) == shard_digests(uninterrupted_output)
    assert _files_under(out) == _files_under(uninterrupted_output)
