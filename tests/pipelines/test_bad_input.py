"""Bad input, limits and accounting, end to end on the image job."""

from __future__ import annotations

import json
import os
import shutil

import numpy as np
import pytest
import tensorflow as tf

from pipelines import images
from reader import contract
from tests import image_fixtures
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
