"""Bad input, limits, accounting and interrupted runs, end to end on the image job."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import tensorflow as tf

from reader import contract
from tests import image_fixtures
from tests.conftest import run_images_job


def rejected_reasons(out: str) -> dict[str, str]:
    with open(os.path.join(out, contract.ERRORS_DIRNAME, contract.REJECTED_FILENAME)) as f:
        return {r["key"]: r["reason"] for r in map(json.loads, f)}


@pytest.fixture()
def small_folder(tmp_path):
    root = str(tmp_path / "in")
    good = image_fixtures.write_image_folder(root, copies=2)
    return root, good


def write_manifest(root: str, rows: list[tuple[str, str]]) -> str:
    path = os.path.join(root, "list.csv")
    with open(path, "w") as f:
        f.write("path,label\n")
        f.writelines(f"{p},{label}\n" for p, label in rows)
    return path


def test_job_fails_above_max_error_fraction_without_manifest(small_folder, tmp_path):
    root, good = small_folder
    for i in range(8):  # 8 bad of 74: 10.8% > 10%
        with open(os.path.join(root, "cat", f"bad{i}.png"), "wb") as f:
            f.write(b"not an image at all")
    out = tmp_path / "out"
    with pytest.raises(Exception, match=r"above --max_error_fraction=0\.1") as info:
        run_images_job(root, str(out))
    assert "unsupported_format x8" in str(info.value)
    assert not (out / contract.MANIFEST_FILENAME).exists()
    # The dead letters are there to debug with; a higher threshold publishes.
    assert len(rejected_reasons(str(out))) == 8
    manifest = run_images_job(root, str(out), "--max_error_fraction=0.2")
    assert manifest["inputs"] == len(good) + 8
    assert manifest["rejected"]["by_reason"] == {"unsupported_format": 8}


def test_cli_reports_threshold_failure_in_one_line(small_folder, tmp_path):
    root, _ = small_folder
    for i in range(8):
        with open(os.path.join(root, "cat", f"bad{i}.png"), "wb") as f:
            f.write(b"")
    result = subprocess.run(
        [sys.executable, "-m", "pipelines.images", f"--input={root}",
         f"--output_dir={tmp_path / 'out'}", "--image_size=8"],
        capture_output=True, text=True, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
    assert result.returncode == 1
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("error: 8 of 74 inputs (10.8%) were rejected")
    assert "empty_file x8" in last


def test_manifest_rows_duplicates_escapes_and_missing_files(small_folder, tmp_path):
    root, good = small_folder
    outside = tmp_path / "outside.png"
    shutil.copy(os.path.join(root, good[0].key), outside)
    rows = [(g.key, g.label) for g in good]
    rows += [(good[1].key, good[1].label),       # duplicate key
             ("../outside.png", "cat"),            # escapes the manifest's folder
             (str(outside), "cat"),                # absolute path outside it
             ("cat/missing.png", "cat")]           # listed but absent
    manifest_path = write_manifest(root, rows)
    out = str(tmp_path / "out")
    manifest = run_images_job(manifest_path, out, "--max_error_fraction=0.5")
    assert manifest["rejected"]["by_reason"] == {
        "duplicate_key": 1, "path_outside_root": 2, "unreadable_file": 1}
    reasons = rejected_reasons(out)
    assert reasons["../outside.png"] == "path_outside_root"
    assert reasons["cat/missing.png"] == "unreadable_file"
    # Exactly one row per duplicated key was written.
    written = sum(manifest["splits"][s]["num_records"] for s in contract.SPLITS)
    assert written == len(good)
    assert manifest["inputs"] == written + manifest["rejected"]["count"]


def test_label_outside_fixed_vocabulary_is_rejected(small_folder, tmp_path):
    root, good = small_folder
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("cat\ndog\n")
    out = str(tmp_path / "out")
    manifest = run_images_job(root, out, f"--label_vocabulary={vocab}",
                              "--max_error_fraction=0.5")
    birds = [g.key for g in good if g.label == "bird"]
    assert manifest["rejected"]["by_reason"] == {"unknown_label": len(birds)}
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
    manifest = json.load(open(os.path.join(out, contract.MANIFEST_FILENAME)))
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


def _unfinished(out: str) -> list[str]:
    found = []
    for folder, _, names in os.walk(out):
        found += [os.path.relpath(os.path.join(folder, n), out) for n in names]
    return sorted(found)


# Where the job is frozen (ETL_PAUSE_AT, etl/core/fault_injection.py) and killed, and
# what must be on disk then: a shard's temporary file, a shard waiting for its final
# name, every shard final but no manifest yet.
@pytest.mark.parametrize("point,unfinished", [
    ("shard_writing", lambda p: p.endswith(".tfrecord.gz.incomplete")),
    ("shard_written", lambda p: "-pending-" in p and p.endswith(".tfrecord.gz")),
    ("manifest_writing", lambda p: "-of-" in p and p.endswith(".tfrecord.gz")),
])
def test_sigkill_leaves_no_manifest_and_the_rerun_succeeds(small_folder, tmp_path, point,
                                                          unfinished):
    root, _ = small_folder
    out = str(tmp_path / "out")
    command = [sys.executable, "-m", "pipelines.images", f"--input={root}",
               f"--output_dir={out}", "--image_size=8", "--num_shards=2"]
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    process = subprocess.Popen(command, env={**env, "ETL_PAUSE_AT": point},
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               start_new_session=True)
    try:
        _wait_until_stopped(process.pid)
        files = _unfinished(out)
        assert any(unfinished(p) for p in files), files
        assert contract.MANIFEST_FILENAME not in files
    finally:
        os.killpg(process.pid, signal.SIGKILL)  # The job and any worker it started.
        process.wait()
    assert not os.path.exists(os.path.join(out, contract.MANIFEST_FILENAME))
    # The next run clears the leftovers (no --overwrite needed) and publishes the same
    # dataset as an uninterrupted run.
    subprocess.run(command, env=env, check=True, capture_output=True)
    reference = str(tmp_path / "reference")
    subprocess.run([*command[:4], f"--output_dir={reference}", *command[5:]], env=env,
                   check=True, capture_output=True)
    assert shard_digests(out) == shard_digests(reference)
    leftovers = [name for name in os.listdir(out) if name.endswith(".incomplete")
                 or name in ("tmp", "transform_tmp")]
    assert leftovers == []
    for split in contract.SPLITS:
        split_dir = os.path.join(out, split)
        if os.path.isdir(split_dir):
            assert all(not n.endswith(".incomplete") for n in os.listdir(split_dir))
            names = sorted(os.listdir(split_dir))
            assert names == sorted(os.path.basename(p) for p in shard_digests(out)
                                   if p.startswith(split + "/"))

