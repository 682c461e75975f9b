"""End-to-end DirectRunner (FnApiRunner) tests of ``python -m pipelines.images``."""

from __future__ import annotations

import glob
import hashlib
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_transform as tft

from etl import contract, splits
from tests.conftest import TEST_IMAGE_SIZE, output_digests, run_images_job


def read_split(out: str, manifest: dict, split: str) -> dict[str, dict]:
    """Reads a split back with plain tf.data + parse_example; returns key → features."""
    spec = contract.feature_spec_from_json(manifest["features"])
    files = [os.path.join(out, shard["path"]) for shard in manifest["splits"][split]["shards"]]
    if not files:
        return {}
    dataset = (tf.data.TFRecordDataset(files, compression_type="GZIP")
               .batch(64).map(lambda records: tf.io.parse_example(records, spec)))
    rows: dict[str, dict] = {}
    for batch in dataset.as_numpy_iterator():
        for i in range(len(batch["key"])):
            row = {name: values[i] for name, values in batch.items()}
            rows[row["key"].decode()] = row
    return rows


def all_records(out: str, manifest: dict) -> dict[str, tuple[str, dict]]:
    return {key: (split, row) for split in contract.SPLITS
            for key, row in read_split(out, manifest, split).items()}




def test_images_job_round_trips_pixels_and_labels(image_folder, png_dataset):
    _, good, _ = image_folder
    out, manifest = png_dataset
    records = all_records(out, manifest)
    assert sorted(records) == sorted(image.key for image in good)
    vocab = manifest["label_vocab"]
    for image in good:
        _, row = records[image.key]
        pixels = tf.io.decode_png(row["image"]).numpy()
        assert pixels.shape == (TEST_IMAGE_SIZE, TEST_IMAGE_SIZE, 3)
        expected = np.broadcast_to(np.array(image.rgb, np.int32), pixels.shape)
        tolerance = 3 if image.lossy else 0
        assert np.abs(pixels.astype(np.int32) - expected).max() <= tolerance, image.key
        assert (row["height"], row["width"], row["channels"]) == (
            TEST_IMAGE_SIZE, TEST_IMAGE_SIZE, 3)
        assert row["label_name"].decode() == image.label
        assert vocab[row["label"]] == image.label


def test_images_job_splits_by_key_hash(png_dataset):
    out, manifest = png_dataset
    fractions = splits.SplitFractions()
    for key, (split, _) in all_records(out, manifest).items():
        assert split == splits.assign_split(key, fractions), key


def test_images_job_manifest_describes_files(png_dataset):
    out, manifest = png_dataset
    assert manifest["format_version"] == contract.FORMAT_VERSION
    assert set(manifest["versions"]) == {"python", "tensorflow", "tensorflow_transform",
                                         "apache_beam"}
    assert manifest["preprocessing"]["image_size"] == TEST_IMAGE_SIZE
    assert manifest["preprocessing"]["image_format"] == "png"
    total = 0
    for split in contract.SPLITS:
        entry = manifest["splits"][split]
        assert entry["num_records"] == sum(s["num_records"] for s in entry["shards"])
        assert entry["num_records"] == sum(manifest["label_counts"][split].values())
        n = len(entry["shards"])
        for index, shard in enumerate(entry["shards"]):
            assert shard["path"] == f"{split}/images-{split}-{index:05d}-of-{n:05d}.tfrecord.gz"
            path = os.path.join(out, shard["path"])
            data = open(path, "rb").read()
            assert shard["num_bytes"] == len(data)
            assert shard["sha256"] == hashlib.sha256(data).hexdigest()
            assert shard["num_records"] > 0
            assert data[:2] == b"\x1f\x8b"  # GZIP magic
        total += entry["num_records"]
    assert total == len(all_records(out, manifest))


def test_images_job_rejects_bad_files_and_reconciles(image_folder, png_dataset):
    _, good, bad = image_folder
    out, manifest = png_dataset
    with open(os.path.join(out, contract.ERRORS_DIRNAME, contract.REJECTED_FILENAME)) as f:
        rejected = [json.loads(line) for line in f]
    assert {r["key"]: r["reason"] for r in rejected} == bad
    assert all(r["message"] and r["source"] for r in rejected)
    assert manifest["rejected"]["count"] == len(bad)
    written = sum(manifest["splits"][s]["num_records"] for s in contract.SPLITS)
    assert written + manifest["rejected"]["count"] == len(good) + len(bad)


def test_images_job_label_vocabulary_fit_on_train_only(tmp_path):
    # "zebra" exists only in an explicit test split folder: it must not enter the
    # vocabulary, and its examples get the documented unknown id -1.
    from tests import image_fixtures

    root = tmp_path / "in"
    image_fixtures.write_image_folder(str(root / "train"), copies=1)
    image_fixtures.write_image_folder(str(root / "test"), copies=1)
    os.rename(root / "test" / "dog", root / "test" / "zebra")
    out = str(tmp_path / "out")
    manifest = run_images_job(str(root), out, "--image_format=png")
    assert sorted(manifest["label_vocab"]) == ["bird", "cat", "dog"]
    test_rows = read_split(out, manifest, "test")
    zebra_ids = {int(r["label"]) for r in test_rows.values() if r["label_name"] == b"zebra"}
    assert zebra_ids == {-1}
    # Split folders take precedence over hashing: every train/ file is in train.
    assert manifest["splits"]["validation"]["num_records"] == 0
    assert all(k.startswith("train/") for k in read_split(out, manifest, "train"))
    assert manifest["label_counts"]["test"]["zebra"] == len(image_fixtures.KINDS)


def test_images_job_serving_parity(image_folder, tmp_path):
    """transform_fn applied to raw file bytes reproduces the stored image bytes."""
    root, good, _ = image_folder
    out = str(tmp_path / "jpeg")
    manifest = run_images_job(root, out)  # Default storage: JPEG.
    records = all_records(out, manifest)
    transform_output = tft.TFTransformOutput(out)
    keys = [image.key for image in good]
    raw = {
        "image": tf.constant([open(os.path.join(root, k), "rb").read() for k in keys]),
        "label": tf.constant([image.label for image in good]),
        "key": tf.constant(keys),
    }
    served = transform_output.transform_raw_features(raw)
    for i, key in enumerate(keys):
        _, row = records[key]
        assert served["image"][i].numpy() == row["image"], key
        assert int(served["label"][i]) == int(row["label"])


@pytest.mark.parametrize("flags", [
    ("--direct_num_workers=2", "--direct_running_mode=multi_threading"),
    ("--direct_num_workers=2", "--direct_running_mode=multi_processing"),
])
def test_images_job_is_byte_identical_across_workers(image_folder, tmp_path, flags):
    root, _, _ = image_folder
    base = run_images_job(root, str(tmp_path / "a"), "--num_shards=3")
    other = run_images_job(root, str(tmp_path / "b"), "--num_shards=3", *flags)
    assert base == other
    digests = output_digests(str(tmp_path / "a"))
    assert len(base["splits"]["train"]["shards"]) == 3
    num_shards = sum(len(base["splits"][s]["shards"]) for s in contract.SPLITS)
    assert len([p for p in digests if p.endswith(".tfrecord.gz")]) == num_shards
    assert digests == output_digests(str(tmp_path / "b"))


def test_images_job_sizes_shards_from_target(image_folder, tmp_path):
    root, good, _ = image_folder
    # ~1 KB target: several shards per split, but never an empty one.
    manifest = run_images_job(root, str(tmp_path / "out"), "--target_shard_mb=0.001",
                              "--image_format=raw")
    train = manifest["splits"]["train"]
    assert 1 < len(train["shards"]) <= train["num_records"]
    assert all(s["num_records"] > 0 for s in train["shards"])
    records = all_records(str(tmp_path / "out"), manifest)
    image = good[0]
    _, row = records[image.key]
    pixels = np.frombuffer(row["image"], np.uint8).reshape(TEST_IMAGE_SIZE, TEST_IMAGE_SIZE, 3)
    assert np.abs(pixels.astype(int) - np.array(image.rgb)).max() <= 3


@pytest.mark.parametrize("suffix", ["csv", "jsonl"])
def test_images_job_reads_manifest_with_split_column(image_folder, tmp_path, suffix):
    root, good, _ = image_folder
    chosen = good[:6]
    manifest_path = os.path.join(root, f"list.{suffix}")  # Paths relative to it.
    with open(manifest_path, "w") as f:
        if suffix == "csv":
            f.write("path,label,split\n")
            for i, image in enumerate(chosen):
                f.write(f"{image.key},{image.label},{'train' if i < 3 else 'val'}\n")
            f.write("missing-columns-row\n")
        else:
            for i, image in enumerate(chosen):
                f.write(json.dumps({"path": image.key, "label": image.label,
                                    "split": "train" if i < 3 else "validation"}) + "\n")
            f.write("{not json\n")
    # 1 malformed line in 7 is above the default 10% error threshold.
    manifest = run_images_job(manifest_path, str(tmp_path / "out"),
                              "--max_error_fraction=0.5")
    # The split column wins over hashing.
    assert manifest["splits"]["train"]["num_records"] == 3
    assert manifest["splits"]["validation"]["num_records"] == 3
    assert manifest["splits"]["test"]["num_records"] == 0
    assert manifest["rejected"]["by_reason"] == {"malformed_manifest_row": 1}


def test_images_job_gzip_level_changes_file_bytes_not_records(image_folder, png_dataset,
                                                             tmp_path):
    root, _, _ = image_folder
    default_out, default_manifest = png_dataset
    out = str(tmp_path / "stored")
    manifest = run_images_job(root, out, "--image_format=png", "--gzip_level=0")
    assert manifest["preprocessing"]["gzip_level"] == 0
    assert default_manifest["preprocessing"]["gzip_level"] == 6
    assert all_records(out, manifest) == all_records(default_out, default_manifest)
    assert (manifest["splits"]["train"]["num_bytes"]
            > default_manifest["splits"]["train"]["num_bytes"])
    with pytest.raises(ValueError, match="--gzip_level must be an integer from 0"):
        run_images_job(root, str(tmp_path / "refused"), "--gzip_level=10")
    assert not os.path.exists(tmp_path / "refused")


def test_images_cli_reports_missing_input_flag(tmp_path):
    result = subprocess.run([sys.executable, "-m", "pipelines.images",
                             f"--output_dir={tmp_path}"], capture_output=True, text=True)
    assert result.returncode != 0
    assert "--input is required" in result.stderr


def test_images_job_refuses_finished_output_without_overwrite(image_folder, tmp_path):
    root, _, _ = image_folder
    out = str(tmp_path / "out")
    run_images_job(root, out, "--num_shards=2")
    with pytest.raises(ValueError, match="--overwrite"):
        run_images_job(root, out)
    # With --overwrite the old dataset is replaced entirely: no stale shard remains.
    manifest = run_images_job(root, out, "--overwrite", "--num_shards=1")
    on_disk = sorted(os.path.relpath(p, out)
                     for p in glob.glob(os.path.join(out, "*", "*.tfrecord.gz")))
    listed = sorted(s["path"] for split in contract.SPLITS
                    for s in manifest["splits"][split]["shards"])
    assert on_disk == listed
    assert not os.path.exists(os.path.join(out, "tmp"))


def test_images_job_fails_without_train_examples(image_folder, tmp_path):
    root, good, _ = image_folder
    manifest_path = os.path.join(root, "eval_only.csv")
    with open(manifest_path, "w") as f:
        f.write("path,label,split\n")
        f.writelines(f"{image.key},{image.label},test\n" for image in good[:2])
    out = tmp_path / "out"
    with pytest.raises(Exception, match="train split is empty"):
        run_images_job(manifest_path, str(out))
    assert not (out / contract.MANIFEST_FILENAME).exists()
