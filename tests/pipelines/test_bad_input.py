"""Bad input, limits and accounting, end to end on the image job."""

from __future__ import annotations

import csv
import io
import json
import os
import shutil
import sys

import numpy as np
import pytest
import tensorflow as tf

from pipelines import common, images, testing, timeseries
from reader.format import contract
from tests import image_fixtures, special_files
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


def test_fifo_and_socket_among_images_are_dead_letters_and_block_nothing(
        small_folder, tmp_path, monkeypatch, root_logging):
    root, good = small_folder
    fifo = special_files.make_fifo(os.path.join(root, "cat", "fifo.jpg"))  # No writer.
    special_files.make_socket(os.path.join(root, "dog", "sock.png"))
    out = tmp_path / "out"
    monkeypatch.setattr(sys, "argv", [
        "pipelines.images", f"--input={root}", f"--output_dir={out}",
        f"--image_size={TEST_IMAGE_SIZE}", "--cross_split_duplicates=off"])
    # A reader left waiting on the FIFO is freed after a while (it then reads an
    # empty file): a regression fails below instead of hanging the suite.
    with special_files.freeing_blocked_readers([fifo]) as freed:
        common.main(images.run)  # Returns: exit status 0 (a failure raises SystemExit).
    assert not freed
    assert rejected_reasons(str(out)) == {"cat/fifo.jpg": "not_a_regular_file",
                                          "dog/sock.png": "not_a_regular_file"}
    with open(out / contract.MANIFEST_FILENAME) as f:
        manifest = json.load(f)
    written = sum(manifest["splits"][s]["num_records"] for s in contract.SPLITS)
    assert (written, manifest["inputs"]) == (len(good), len(good) + 2)
    assert manifest["inputs"] == written + manifest["rejected"]["count"]


@pytest.mark.parametrize("name", ["list.csv", "list.jsonl"])
def test_manifest_that_is_a_fifo_is_an_error_line(tmp_path, monkeypatch, root_logging,
                                                  name):
    fifo = special_files.make_fifo(tmp_path / name)
    with special_files.freeing_blocked_readers([fifo]) as freed:
        exit_error = run_main(monkeypatch, images.run, [
            f"--input={fifo}", f"--output_dir={tmp_path / 'out'}"])
    assert not freed
    assert exit_error.code == (f"error: --input {fifo!r} is a FIFO (named pipe), not a "
                               f"regular file.")
    assert not (tmp_path / "out").exists()  # Refused before anything was written.


def test_timeseries_glob_matching_a_fifo_is_an_error_line(tmp_path, monkeypatch,
                                                         root_logging):
    (tmp_path / "a.jsonl").write_text(
        "".join(json.dumps({"series_id": "a", "timestamp": t, "value": t}) + "\n"
                for t in range(12)))
    fifo = special_files.make_fifo(tmp_path / "b.jsonl")
    pattern = str(tmp_path / "*.jsonl")
    with special_files.freeing_blocked_readers([fifo]) as freed:
        exit_error = run_main(monkeypatch, timeseries.run, [
            f"--input={pattern}", f"--output_dir={tmp_path / 'out'}", "--window_size=3"])
    assert not freed
    assert exit_error.code == (
        f"error: --input {pattern!r} matches {fifo!r}, a FIFO (named pipe), not a regular "
        f"file (reading one can block forever or never end): remove it or narrow --input.")


# --- Names and bytes no job may stop on (issue 59) ------------------------------------

def documented_key(name: bytes) -> str:
    """A key by docs/FORMAT.md's rule for a name that is ASCII but for bytes that are
    not UTF-8 (and holds no "%"): each such byte as %XX."""
    return "".join(chr(b) if b < 0x80 else f"%{b:02X}" for b in name)


def all_records(out: str) -> list[dict]:
    return [r for split in contract.SPLITS for r in testing.read_records(out, split)]


@pytest.fixture(scope="module")
def line_break_folder_run(tmp_path_factory):
    """A folder with a class folder whose name holds a line break:
    (output dir, manifest, good images)."""
    root = str(tmp_path_factory.mktemp("line_break") / "in")
    good = image_fixtures.write_image_folder(root, copies=1)
    os.makedirs(os.path.join(root, "two\nlines"))
    shutil.copy(os.path.join(root, good[0].key), os.path.join(root, "two\nlines", "a.png"))
    out = os.path.join(os.path.dirname(root), "out")
    return out, run_images_job(root, out), good


def test_class_folder_with_a_line_break_is_invalid_label_never_stored_as_minus_one(
        line_break_folder_run):
    out, manifest, good = line_break_folder_run
    assert manifest["inputs"] == len(good) + 1
    assert manifest["rejected"]["by_reason"] == {"invalid_label": 1}
    assert rejected_reasons(out) == {"two\nlines/a.png": "invalid_label"}
    [example] = manifest["rejected"]["examples"]["invalid_label"]
    assert "line break" in example["message"] and "vocabulary" in example["message"]
    assert sorted(manifest["label_vocab"]) == sorted(image_fixtures.LABELS)
    assert {label for counts in manifest["label_counts"].values() for label in counts} == \
        set(image_fixtures.LABELS)
    stored = all_records(out)
    assert sorted(r["key"] for r in stored) == sorted(g.key for g in good)
    assert all(r["label"] == manifest["label_vocab"].index(r["label_name"]) for r in stored)


def test_names_that_are_not_utf8_are_escaped_keys_and_their_files_read(tmp_path):
    root = str(tmp_path / "in")
    good = image_fixtures.write_image_folder(root, copies=1)
    cat = next(g for g in good if g.label == "cat")
    dog = next(g for g in good if g.label == "dog")
    names = {b"cat/caf\xe9.png": cat, b"caf\xe9/\xff.png": dog}  # name -> its copy
    for name, original in names.items():
        os.makedirs(os.path.dirname(os.path.join(os.fsencode(root), name)), exist_ok=True)
        shutil.copy(os.path.join(root, original.key), os.path.join(os.fsencode(root), name))
    out = str(tmp_path / "out")
    manifest = run_images_job(root, out)
    assert manifest["inputs"] == len(good) + 2
    assert manifest["rejected"]["count"] == 0
    # The class folder b"caf\xe9", escaped, is a class (in whichever split its image is).
    assert "caf%E9" in {label for counts in manifest["label_counts"].values()
                        for label in counts}
    by_key = {r["key"]: r for r in all_records(out)}
    assert sorted(by_key) == sorted([g.key for g in good] + [documented_key(n) for n in names])
    for name, original in names.items():
        stored = by_key[documented_key(name)]
        assert stored["label_name"] == documented_key(name.split(b"/")[0])
        assert stored["image"] == by_key[original.key]["image"]  # The same file's bytes.


@pytest.fixture(scope="module")
def odd_manifest_run(tmp_path_factory):
    """A CSV manifest with a latin-1 byte, a quoted two-line label (as Python's csv
    writes it) and a file listed again by its absolute and its "./" path:
    (output dir, manifest, manifest path, good images)."""
    root = str(tmp_path_factory.mktemp("odd_manifest") / "in")
    good = image_fixtures.write_image_folder(root, copies=1)
    shutil.copy(os.path.join(root, good[0].key), os.path.join(root, "copy.png"))
    text = io.StringIO()
    writer = csv.writer(text)
    writer.writerow(["path", "label"])
    writer.writerows([(g.key, g.label) for g in good])
    writer.writerow(["copy.png", "big\ncat"])
    writer.writerow([os.path.abspath(os.path.join(root, good[1].key)), good[1].label])
    writer.writerow([f"./{good[2].key}", good[2].label])
    manifest_path = os.path.join(root, "list.csv")
    with open(manifest_path, "wb") as f:
        f.write(text.getvalue().encode() + b"cat/x.png,caf\xe9\r\n")
    out = os.path.join(os.path.dirname(root), "out")
    return (out, run_images_job(manifest_path, out, "--max_error_fraction=0.5"),
            manifest_path, good)


def test_manifest_rows_are_csv_rows_and_a_byte_that_is_not_utf8_is_one_dead_letter(
        odd_manifest_run):
    out, manifest, manifest_path, good = odd_manifest_run
    # Rows, not lines: header, the good rows, 4 more; the two-line row is one input.
    assert manifest["inputs"] == len(good) + 4
    assert manifest["rejected"]["by_reason"] == {
        "invalid_label": 1, "duplicate_key": 2, "malformed_manifest_row": 1}
    # Lines: the header, the good rows, the two-line row, the absolute and "./" rows.
    two_line, latin1_line = 1 + len(good) + 1, 1 + len(good) + 2 + 1 + 1 + 1
    messages = {r["key"]: (r["reason"], r["message"]) for r in testing.read_rejected(out)}
    reason, message = messages[f"{manifest_path}:{latin1_line}"]
    assert reason == "malformed_manifest_row"
    assert f"not UTF-8 text (byte 0xE9 on line {latin1_line})" in message
    reason, message = messages["copy.png"]
    assert reason == "invalid_label" and "line break" in message and "vocabulary" in message
    assert f"(The row spans lines {two_line}-{two_line + 1}: " in message
    assert sorted(manifest["label_vocab"]) == sorted(image_fixtures.LABELS)


def test_manifest_spellings_of_one_file_are_one_key(odd_manifest_run):
    out, manifest, _, good = odd_manifest_run
    assert {k: r for k, r in rejected_reasons(out).items() if r == "duplicate_key"} == {
        good[1].key: "duplicate_key", good[2].key: "duplicate_key"}
    stored = all_records(out)
    assert sorted(r["key"] for r in stored) == sorted(g.key for g in good)
    assert sum(manifest["splits"][s]["num_records"] for s in contract.SPLITS) == len(good)
