"""Growing a dataset with ``--append``, end to end on the image job.

Version 1 is built from half of a folder (every other image); the whole folder, with
one image of a class version 1 never saw, is then appended: first a run killed just
before it publishes (the dataset must stay version 1, readable and whole), then the
rerun, which resumes it and publishes version 2; then an append with nothing new.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import shutil

import pytest

import reader
from etl.core import dead_letters
from etl.core.run import fault_injection, versions
from reader.format import contract
from reader.tfdata.dataset_info import load_manifest
from tests import image_fixtures
from tests.job_commands import run_until_killed
from tests.job_runs import (
    REPORT_DUPLICATES,
    TEST_IMAGE_SIZE,
    all_records,
    files_under,
    run_images_job,
    run_images_job_printing,
)

# With the duplicate report, as the killed command runs by default: the append is
# checked against version 1's kept signatures.
FLAGS = ("--num_shards=2", REPORT_DUPLICATES)
NEW_CLASS_KEY = "zebra/stripes.png"


def _tree_digests(out: str) -> dict[str, str]:
    digests = {}
    for relpath in files_under(out):
        with open(os.path.join(out, relpath), "rb") as f:
            digests[relpath] = hashlib.sha256(f.read()).hexdigest()
    return digests


def _read_count(out: str) -> int:
    """Examples the reader yields, over every split, one pass."""
    return sum(int(images.shape[0])
               for split in contract.SPLITS
               for images, _ in reader.make_dataset(out, split, 8, shuffle=False,
                                                    num_epochs=1))


@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> tuple[str, str, list[str]]:
    """(half folder, whole folder, every key of the whole folder but the new class)."""
    base = tmp_path_factory.mktemp("append_input")
    whole, half = str(base / "whole"), str(base / "half")
    images = image_fixtures.write_image_folder(whole, copies=1)
    for image in images[::2]:
        os.makedirs(os.path.dirname(os.path.join(half, image.key)), exist_ok=True)
        shutil.copy(os.path.join(whole, image.key), os.path.join(half, image.key))
    os.makedirs(os.path.join(whole, "zebra"))
    png = next(image for image in images if image.key.endswith(".png"))
    shutil.copy(os.path.join(whole, png.key), os.path.join(whole, NEW_CLASS_KEY))
    return half, whole, sorted(image.key for image in images)


@pytest.fixture(scope="module")
def grown(folders, tmp_path_factory) -> dict:
    """Version 1, then the killed append, its rerun and an append of nothing new."""
    half, whole, _ = folders
    out = str(tmp_path_factory.mktemp("grown") / "out")
    v1 = run_images_job(half, out, *FLAGS)
    v1_files = _tree_digests(out)
    run_until_killed("images", f"--input={whole}", f"--output_dir={out}", "--append",
                     f"--image_size={TEST_IMAGE_SIZE}", *FLAGS,
                     point=fault_injection.MANIFEST_WRITING)
    after_kill = {"manifest": load_manifest(out), "read": _read_count(out),
                  "files": files_under(out)}
    reader.open_dataset(out, verify=True)  # every shard of version 1, hashed
    # The reruns in-process: the same job, without another interpreter start.
    _, stdout, stderr = run_images_job_printing(whole, out, "--append", *FLAGS)
    v2 = load_manifest(out)
    v2_files = _tree_digests(out)
    _, again_stdout, _ = run_images_job_printing(whole, out, "--append", *FLAGS)
    return {"out": out, "v1": v1, "v1_files": v1_files, "after_kill": after_kill,
            "rerun_stdout": stdout, "rerun_stderr": stderr, "v2": v2, "v2_files": v2_files,
            "again_stdout": again_stdout}


def test_an_interrupted_append_leaves_the_previous_version_whole(grown):
    after_kill = grown["after_kill"]
    assert after_kill["manifest"] == grown["v1"]
    assert after_kill["read"] == sum(grown["v1"]["splits"][s]["num_records"]
                                     for s in contract.SPLITS)
    # The append had written its shards, unlisted, beside the published ones.
    assert any("-v2-" in path for path in after_kill["files"])


def test_the_rerun_resumes_the_interrupted_append(grown):
    assert "resumed: " in grown["rerun_stdout"] and ", 0 transformed (0 inputs)" in grown[
        "rerun_stdout"], grown["rerun_stdout"]


def test_the_appended_dataset_holds_every_image_once(grown, folders):
    _, _, keys = folders
    out, v2 = grown["out"], grown["v2"]
    stored = all_records(out, v2)
    assert sorted(stored) == keys  # exactly once each: a dict would hide a repeat
    written = sum(v2["splits"][s]["num_records"] for s in contract.SPLITS)
    assert written == len(keys) == _read_count(out)
    assert v2["inputs"] == len(keys) + 1 == written + v2["rejected"]["count"]
    reader.open_dataset(out, verify=True)  # every shard of both versions, hashed


def test_old_shards_are_untouched_and_new_ones_sit_beside_them(grown):
    v1_files, v2_files = grown["v1_files"], grown["v2_files"]
    old_shards = {p: d for p, d in v1_files.items() if p.endswith(contract.SHARD_SUFFIX)}
    assert old_shards and all(v2_files[p] == d for p, d in old_shards.items())
    for split in contract.SPLITS:
        old = [s["path"] for s in grown["v1"]["splits"][split]["shards"]]
        listed = [s["path"] for s in grown["v2"]["splits"][split]["shards"]]
        assert listed[:len(old)] == old  # the old shards first, in their order
        assert all("-v2-" in path for path in listed[len(old):])


def test_the_manifest_says_what_each_version_added(grown, folders):
    v2 = grown["v2"]
    assert v2["dataset_version"] == 2
    assert v2["history"][0] == grown["v1"]["history"][0]
    assert [entry["version"] for entry in v2["history"]] == [1, 2]
    added = v2["history"][1]
    assert added["inputs"] == v2["inputs"] - grown["v1"]["inputs"]
    assert added["rejected"] == 1 and added["rejected_file"] == "errors/rejected-v00002.jsonl"
    with open(os.path.join(grown["out"], added["keys"])) as f:
        new_keys = [json.loads(line) for line in f]
    assert new_keys == sorted(set(folders[2]) - set(all_records(grown["out"], grown["v1"]))
                              | {NEW_CLASS_KEY})


def test_a_label_the_vocabulary_lacks_is_a_dead_letter_with_the_rebuild_hint(grown):
    with open(os.path.join(grown["out"], "errors", "rejected-v00002.jsonl")) as f:
        [rejection] = [json.loads(line) for line in f]
    assert rejection["key"] == NEW_CLASS_KEY
    assert rejection["reason"] == dead_letters.LABEL_NOT_IN_DATASET
    assert "'zebra' is not in the dataset's label vocabulary" in rejection["message"]
    assert "rebuild it with --overwrite" in rejection["message"]
    assert grown["v2"]["label_vocab"] == grown["v1"]["label_vocab"]


def test_appended_images_take_the_datasets_class_ids(grown):
    v1, v2 = grown["v1"], grown["v2"]
    assert v1["label_vocab"] == sorted(v1["label_counts"]["train"])  # numbered by name
    vocab = v1["label_vocab"]
    stored = all_records(grown["out"], v2)
    assert any("-v2-" in path for path in files_under(grown["out"]))
    assert {key: int(row["label"]) for key, (_, row) in stored.items()} == {
        key: vocab.index(name) if name in vocab else -1
        for key, name in ((key, row["label_name"].decode())
                          for key, (_, row) in stored.items())}


def _append_job(folders, out: str, *flags: str):
    from pipelines import images

    return images.ImageJob.from_options(images.ImagesOptions([
        f"--input={folders[1]}", f"--output_dir={out}", "--append",
        f"--image_size={TEST_IMAGE_SIZE}", *FLAGS, *flags]))


def test_append_refuses_another_class_order(grown, folders):
    with pytest.raises(ValueError, match=r"--append keeps the dataset's class ids, numbered "
                                         r"by name .* --class_order=frequency would "
                                         r"renumber them"):
        _append_job(folders, grown["out"], "--class_order=frequency")


def test_append_to_a_dataset_from_before_class_order_keeps_frequency_order(
        grown, folders, tmp_path):
    old = str(tmp_path / "old")
    shutil.copytree(grown["out"], old)
    manifest_path = os.path.join(old, contract.MANIFEST_FILENAME)
    with open(manifest_path) as f:
        manifest = json.load(f)
    del manifest["preprocessing"]["labels"]["class_order"]
    with open(manifest_path, "w") as f:
        f.write(contract.dumps_manifest(manifest))
    job = _append_job(folders, old)
    assert job.columns.class_order == "frequency"
    assert job.version.number == 3
    with pytest.raises(ValueError, match="numbered by frequency"):
        _append_job(folders, old, "--class_order=name")


def test_an_append_with_nothing_new_changes_nothing_and_says_so(grown):
    assert _tree_digests(grown["out"]) == grown["v2_files"]
    assert grown["again_stdout"].strip().startswith("Nothing to append:"), grown[
        "again_stdout"]
    assert "already holds every input (all 34 listed inputs)" in grown["again_stdout"]


def test_append_refuses_other_preprocessing(grown):
    with pytest.raises(ValueError, match="its image_size is 16, this run's 32"):
        versions.DatasetVersion.appending_to(
            grown["out"], contract.IMAGES, "images",
            {**grown["v2"]["preprocessing"], "image_size": 32})


def test_append_keeps_the_datasets_compression(grown, tmp_path):
    preprocessing = grown["v2"]["preprocessing"]
    with pytest.raises(ValueError, match='its compression is "gzip", this run\'s "none"'):
        versions.DatasetVersion.appending_to(
            grown["out"], contract.IMAGES, "images",
            {**preprocessing, "compression": "none"})
    # A dataset written before --compression existed is GZIP, and takes gzip appends.
    old = str(tmp_path / "old")
    shutil.copytree(grown["out"], old)
    manifest_path = os.path.join(old, contract.MANIFEST_FILENAME)
    with open(manifest_path) as f:
        manifest = json.load(f)
    del manifest["compression"], manifest["preprocessing"]["compression"]
    with open(manifest_path, "w") as f:
        f.write(contract.dumps_manifest(manifest))
    version = versions.DatasetVersion.appending_to(old, contract.IMAGES, "images",
                                                   preprocessing)
    assert version.number == 3


def _deflate_as_zlib(out: str) -> None:
    """Rewrites every shard of the dataset in ``out`` as the code before ISA-L wrote
    them (Python's gzip, the same records, level 6) and its manifest to match."""
    manifest_path = os.path.join(out, contract.MANIFEST_FILENAME)
    with open(manifest_path) as f:
        manifest = json.load(f)
    for split in contract.SPLITS:
        for shard in manifest["splits"][split]["shards"]:
            path = os.path.join(out, shard["path"])
            with gzip.open(path, "rb") as f:
                records = f.read()
            with open(path, "wb") as raw, gzip.GzipFile(filename="", mode="wb",
                                                        compresslevel=6, fileobj=raw,
                                                        mtime=0) as f:
                f.write(records)
            with open(path, "rb") as f:
                data = f.read()
            shard["num_bytes"], shard["sha256"] = len(data), hashlib.sha256(data).hexdigest()
        manifest["splits"][split]["num_bytes"] = sum(
            shard["num_bytes"] for shard in manifest["splits"][split]["shards"])
    del manifest["versions"]["isal"]
    with open(manifest_path, "w") as f:
        f.write(contract.dumps_manifest(manifest))


def test_an_append_to_a_dataset_deflated_by_zlib_reads_whole(folders, tmp_path):
    """A dataset written before deflate went to ISA-L takes an append: its shards
    keep their zlib bytes, the new version's are ISA-L's, and the reader reads and
    verifies both (small images: deflated at level 6 by default)."""
    half, whole, _ = folders
    out = str(tmp_path / "out")
    run_images_job(half, out, *FLAGS)
    _deflate_as_zlib(out)
    v1_records = _read_count(out)
    before = _tree_digests(out)
    reader.open_dataset(out, verify=True)
    _, stdout, _ = run_images_job_printing(whole, out, "--append", *FLAGS)
    manifest = load_manifest(out)
    assert manifest["dataset_version"] == 2, stdout
    shards = [shard["path"] for split in contract.SPLITS
              for shard in manifest["splits"][split]["shards"]]
    kept = [path for path in shards if path in before]
    assert kept and all(_tree_digests(out)[path] == before[path] for path in kept)
    assert len(kept) < len(shards)
    reader.open_dataset(out, verify=True)
    assert _read_count(out) == sum(manifest["splits"][split]["num_records"]
                                   for split in contract.SPLITS) > v1_records


def test_append_needs_a_finished_dataset(tmp_path, folders):
    with pytest.raises(ValueError, match="holds none"):
        run_images_job(folders[0], str(tmp_path / "empty"), "--append")
