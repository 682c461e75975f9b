"""End-to-end DirectRunner (FnApiRunner) tests of ``python -m pipelines.images``.

Each module-scoped fixture below is one job run; several tests read its output,
each checking one behaviour. Behaviours of a single composite are tested with
``TestPipeline`` beside the composite (``tests/etl/images/test_*_pipeline.py``).
"""

from __future__ import annotations

import glob
import gzip
import io
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_transform as tft

from etl.core.publishing import accounting
from etl.core.shards import splits
from reader.format import contract
from tests import image_fixtures
from tests.job_commands import start_job
from tests.job_runs import (
    TEST_IMAGE_SIZE,
    all_records,
    output_digests,
    read_split,
    rejected_records,
    run_images_job,
    run_main,
    shard_digests,
)


def _write(path: str, data: bytes) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)


def _written(manifest: dict) -> int:
    return sum(manifest["splits"][s]["num_records"] for s in contract.SPLITS)


# --- The PNG run of the every-format folder (conftest's png_dataset) ------------------

def test_images_job_stores_every_good_image_and_no_bad_one(image_folder, png_dataset):
    _, good, _ = image_folder
    out, manifest = png_dataset
    assert sorted(all_records(out, manifest)) == sorted(image.key for image in good)


def test_images_job_round_trips_pixels(image_folder, png_dataset):
    # Solid fixture colours: any resize and crop leaves the colour everywhere.
    _, good, _ = image_folder
    records = all_records(*png_dataset)
    for image in good:
        pixels = tf.io.decode_png(records[image.key][1]["image"]).numpy()
        assert pixels.shape == (TEST_IMAGE_SIZE, TEST_IMAGE_SIZE, 3), image.key
        expected = np.broadcast_to(np.array(image.rgb, np.int32), pixels.shape)
        tolerance = 3 if image.lossy else 0
        assert np.abs(pixels.astype(np.int32) - expected).max() <= tolerance, image.key


def test_images_job_stores_the_image_shape(png_dataset):
    records = all_records(*png_dataset)
    assert {(int(row["height"]), int(row["width"]), int(row["channels"]))
            for _, row in records.values()} == {(TEST_IMAGE_SIZE, TEST_IMAGE_SIZE, 3)}


def test_images_job_stores_label_names_and_their_vocabulary_ids(image_folder, png_dataset):
    _, good, _ = image_folder
    out, manifest = png_dataset
    records = all_records(out, manifest)
    vocab = manifest["label_vocab"]
    assert {key: (row["label_name"].decode(), vocab[row["label"]])
            for key, (_, row) in records.items()} == {
        image.key: (image.label, image.label) for image in good}


def test_images_job_splits_by_key_hash(png_dataset):
    fractions = splits.SplitFractions()
    records = all_records(*png_dataset)
    assert {key: split for key, (split, _) in records.items()} == {
        key: splits.assign_split(key, fractions) for key in records}


def test_images_job_manifest_names_format_and_versions(png_dataset):
    _, manifest = png_dataset
    assert manifest["format_version"] == contract.FORMAT_VERSION
    assert set(manifest["versions"]) == {"python", "tensorflow", "tensorflow_transform",
                                         "apache_beam", "isal"}
    assert (manifest["preprocessing"]["image_size"],
            manifest["preprocessing"]["image_format"]) == (TEST_IMAGE_SIZE, "png")


def test_images_job_manifest_names_shards_in_index_order(png_dataset):
    _, manifest = png_dataset
    for split in contract.SPLITS:
        shards = manifest["splits"][split]["shards"]
        n = len(shards)
        assert [s["path"] for s in shards] == [
            f"{split}/images-{split}-{i:05d}-of-{n:05d}.tfrecord.gz" for i in range(n)]


def test_images_job_manifest_states_each_shards_size_and_sha256(png_dataset):
    import hashlib

    out, manifest = png_dataset
    for split in contract.SPLITS:
        for shard in manifest["splits"][split]["shards"]:
            with open(os.path.join(out, shard["path"]), "rb") as f:
                data = f.read()
            assert data[:2] == b"\x1f\x8b"  # GZIP magic
            assert (shard["num_bytes"], shard["sha256"]) == (
                len(data), hashlib.sha256(data).hexdigest()), shard["path"]


def test_images_job_manifest_counts_match_the_records(png_dataset):
    out, manifest = png_dataset
    for split in contract.SPLITS:
        entry = manifest["splits"][split]
        stored = len(read_split(out, manifest, split))
        assert all(s["num_records"] > 0 for s in entry["shards"]), split
        assert (entry["num_records"], sum(s["num_records"] for s in entry["shards"]),
                sum(manifest["label_counts"][split].values())) == (stored,) * 3, split


def test_images_job_rejects_bad_files_with_their_reasons(image_folder, png_dataset):
    _, _, bad = image_folder
    out, _ = png_dataset
    rejected = rejected_records(out)
    assert {r["key"]: r["reason"] for r in rejected} == bad
    assert all(r["message"] and r["source"] for r in rejected)


def test_images_job_reconciles_inputs_with_written_and_rejected(image_folder, png_dataset):
    _, good, bad = image_folder
    _, manifest = png_dataset
    assert (manifest["inputs"], _written(manifest), manifest["rejected"]["count"]) == (
        len(good) + len(bad), len(good), len(bad))


# --- Default (JPEG) storage of the same folder in 3 shards: determinism, serving ------

@pytest.fixture(scope="module")
def jpeg_dataset(image_folder, tmp_path_factory):
    root, _, _ = image_folder
    out = str(tmp_path_factory.mktemp("jpeg_dataset"))
    return out, run_images_job(root, out, "--num_shards=3")


# Byte-identical output on two worker threads (which share the transform and the
# decoders) is checked on gs:// against this folder on disk by
# tests/pipelines/test_object_store.py; on two worker processes (which pickle every
# step) by scripts/checks/clean_install.sh, which scripts/test.sh runs.


def test_images_job_writes_num_shards_files_per_split(jpeg_dataset):
    out, manifest = jpeg_dataset
    on_disk = sorted(os.path.relpath(p, out) for p in glob.glob(
        os.path.join(out, "*", "*" + contract.SHARD_SUFFIX)))
    listed = sorted(s["path"] for split in contract.SPLITS
                    for s in manifest["splits"][split]["shards"])
    assert len(manifest["splits"]["train"]["shards"]) == 3
    assert on_disk == listed


def test_images_job_serving_parity(image_folder, jpeg_dataset):
    """transform_fn applied to raw file bytes reproduces the stored image bytes."""
    root, good, _ = image_folder
    out, manifest = jpeg_dataset
    records = all_records(out, manifest)
    keys = [image.key for image in good]
    served = tft.TFTransformOutput(out).transform_raw_features({
        "image": tf.constant([open(os.path.join(root, k), "rb").read() for k in keys]),
        "label": tf.constant([image.label for image in good]),
        "key": tf.constant(keys),
    })
    assert [(served["image"][i].numpy(), int(served["label"][i])) for i in range(len(keys))] \
        == [(records[k][1]["image"], int(records[k][1]["label"])) for k in keys]


@pytest.fixture()
def finished_output(jpeg_dataset, tmp_path) -> str:
    """A copy of a finished 3-shard dataset, to be written over."""
    out = str(tmp_path / "out")
    shutil.copytree(jpeg_dataset[0], out)
    return out


def test_images_job_refuses_finished_output_without_overwrite(image_folder, finished_output):
    root, _, _ = image_folder
    before = output_digests(finished_output)
    with pytest.raises(ValueError, match="--overwrite"):
        run_images_job(root, finished_output)
    assert output_digests(finished_output) == before


def test_images_job_overwrite_leaves_no_stale_shard(image_folder, finished_output):
    # ... and keeps the user's files beside the dataset, in folders named like ours too.
    root, _, _ = image_folder
    theirs = {"NOTES.md": b"notes", "train/notes.txt": b"mine", "train/raw/cat.jpg": b"c",
              "test/old-shard.tfrecord.gz": b"old"}
    for relpath, data in theirs.items():
        os.makedirs(os.path.dirname(os.path.join(finished_output, relpath)), exist_ok=True)
        with open(os.path.join(finished_output, relpath), "wb") as f:
            f.write(data)
    manifest = run_images_job(root, finished_output, "--overwrite", "--num_shards=1")
    for relpath, data in theirs.items():
        with open(os.path.join(finished_output, relpath), "rb") as f:
            assert f.read() == data, relpath
    on_disk = sorted(os.path.relpath(p, finished_output)
                     for p in glob.glob(os.path.join(finished_output, "*", "*.tfrecord.gz")))
    listed = sorted(s["path"] for split in contract.SPLITS
                    for s in manifest["splits"][split]["shards"])
    assert [p for p in on_disk if p not in theirs] == listed == [
        f"{s}/images-{s}-00000-of-00001.tfrecord.gz" for s in sorted(contract.SPLITS)]
    assert not os.path.exists(os.path.join(finished_output, "tmp"))


# --- Labels: split folders and the vocabulary ----------------------------------------

# Train counts chosen so that the name order (sorted(), as Keras and torchvision,
# docs/LABELS.md) and the frequency order (decreasing train frequency, ties in reverse
# byte order) differ from each other and from every simpler rule (the folders are
# listed in neither order); the test split holds a label train never saw and enough
# "d" to come first if counted.
TRAIN_COUNTS = {"b": 3, "a": 2, "c": 2, "Z": 2, "d": 1}
TEST_COUNTS = {"zebra": 2, "d": 5}


@pytest.fixture(scope="module")
def split_folder(tmp_path_factory):
    root = tmp_path_factory.mktemp("split_folders")
    for split, counts in (("train", TRAIN_COUNTS), ("test", TEST_COUNTS)):
        for label, count in counts.items():
            for i in range(count):
                _write(str(root / "in" / split / label / f"{i}.png"),
                       image_fixtures._encode("png", 4, 4, (i, 9, 9)))
    return root


@pytest.fixture(scope="module")
def split_folder_run(split_folder):
    out = str(split_folder / "out")
    return out, run_images_job(str(split_folder / "in"), out, "--image_format=png")


@pytest.fixture(scope="module")
def frequency_order_run(split_folder):
    out = str(split_folder / "by_frequency")
    return out, run_images_job(str(split_folder / "in"), out, "--image_format=png",
                               "--class_order=frequency")


def test_images_job_numbers_classes_by_sorted_names_by_default(split_folder_run):
    _, manifest = split_folder_run
    assert sorted(TRAIN_COUNTS) == ["Z", "a", "b", "c", "d"]  # code points: "Z" < "a"
    assert manifest["label_vocab"] == sorted(TRAIN_COUNTS)
    assert manifest["preprocessing"]["labels"]["class_order"] == "name"


def test_images_job_stores_vocabulary_positions_as_label_ids(split_folder_run):
    out, manifest = split_folder_run
    rows = read_split(out, manifest, "train")
    assert {(r["label_name"].decode(), int(r["label"])) for r in rows.values()} == {
        ("Z", 0), ("a", 1), ("b", 2), ("c", 3), ("d", 4)}


def test_images_job_class_order_frequency_is_the_documented_order(frequency_order_run):
    out, manifest = frequency_order_run
    by_bytes_descending = sorted(TRAIN_COUNTS, key=lambda label: label.encode(), reverse=True)
    expected = sorted(by_bytes_descending, key=lambda label: -TRAIN_COUNTS[label])
    assert expected == ["b", "c", "a", "Z", "d"]  # the rule, worked by hand
    assert manifest["label_vocab"] == expected
    assert manifest["preprocessing"]["labels"]["class_order"] == "frequency"
    rows = read_split(out, manifest, "train")
    assert {(r["label_name"].decode(), int(r["label"])) for r in rows.values()} == {
        (name, expected.index(name)) for name in TRAIN_COUNTS}


def test_images_job_serving_transform_maps_names_to_the_stored_ids(split_folder_run):
    out, manifest = split_folder_run
    stored = {(r["label_name"].decode(), int(r["label"]))
              for split in contract.SPLITS for r in read_split(out, manifest, split).values()}
    names = sorted({name for name, _ in stored})
    png = image_fixtures._encode("png", 4, 4, (0, 9, 9))
    served = tft.TFTransformOutput(out).transform_raw_features({
        "image": tf.constant([png] * len(names)), "key": tf.constant(names),
        "label": tf.constant(names)})
    assert set(zip(names, served["label"].numpy().tolist(), strict=True)) == stored


def test_images_job_gives_labels_unseen_in_train_id_minus_one(split_folder_run):
    out, manifest = split_folder_run
    rows = read_split(out, manifest, "test")
    assert sorted((r["label_name"].decode(), int(r["label"])) for r in rows.values()) == [
        ("d", 4)] * 5 + [("zebra", -1)] * 2


def test_images_job_split_folders_take_precedence_over_hashing(split_folder_run):
    out, manifest = split_folder_run
    stored = {split: sorted(read_split(out, manifest, split)) for split in contract.SPLITS}
    assert stored == {
        "train": sorted(f"train/{label}/{i}.png" for label, n in TRAIN_COUNTS.items()
                        for i in range(n)),
        "validation": [],
        "test": sorted(f"test/{label}/{i}.png" for label, n in TEST_COUNTS.items()
                       for i in range(n)),
    }


def test_images_job_counts_labels_per_split(split_folder_run):
    _, manifest = split_folder_run
    assert manifest["label_counts"]["test"] == TEST_COUNTS


# --- Shard sizing and raw storage ----------------------------------------------------

@pytest.fixture(scope="module")
def small_raw_shards(image_folder, tmp_path_factory):
    root, _, _ = image_folder
    out = str(tmp_path_factory.mktemp("small_raw_shards"))
    # ~1 KB target: several shards per split.
    return out, run_images_job(root, out, "--target_shard_mb=0.001", "--image_format=raw")


def test_images_job_sizes_shards_from_target(small_raw_shards):
    _, manifest = small_raw_shards
    train = manifest["splits"]["train"]
    assert 1 < len(train["shards"]) <= train["num_records"]
    assert min(s["num_records"] for s in train["shards"]) > 0


def test_images_job_stores_raw_pixels(image_folder, small_raw_shards):
    _, good, _ = image_folder
    records = all_records(*small_raw_shards)
    for image in good:
        pixels = np.frombuffer(records[image.key][1]["image"], np.uint8).reshape(
            TEST_IMAGE_SIZE, TEST_IMAGE_SIZE, 3)
        tolerance = 3 if image.lossy else 0
        assert np.abs(pixels.astype(int) - np.array(image.rgb)).max() <= tolerance, image.key


# --- GZIP level ----------------------------------------------------------------------

@pytest.fixture(scope="module")
def stored_gzip(image_folder, tmp_path_factory):
    root, _, _ = image_folder
    out = str(tmp_path_factory.mktemp("stored_gzip"))
    return out, run_images_job(root, out, "--image_format=png", "--gzip_level=0")


def test_images_job_records_the_gzip_level(png_dataset, stored_gzip):
    # 16 px PNGs are small enough for deflate to pay: the default deflates them.
    assert (png_dataset[1]["preprocessing"]["gzip_level"],
            stored_gzip[1]["preprocessing"]["gzip_level"]) == (6, 0)


def test_images_job_gzip_level_keeps_the_records(png_dataset, stored_gzip):
    assert all_records(*stored_gzip) == all_records(*png_dataset)


def test_images_job_gzip_level_zero_writes_larger_files(png_dataset, stored_gzip):
    assert (stored_gzip[1]["splits"]["train"]["num_bytes"]
            > png_dataset[1]["splits"]["train"]["num_bytes"])


def test_images_job_gzip_level_zero_files_are_stored_gzip_streams(stored_gzip):
    # Still GZIP (Python's gzip inflates it), no smaller than the records it holds.
    out, manifest = stored_gzip
    for shard in manifest["splits"]["train"]["shards"]:
        with open(os.path.join(out, shard["path"]), "rb") as f:
            stored = f.read()
        assert len(stored) > len(gzip.decompress(stored)) > 0


def test_images_job_refuses_gzip_level_out_of_range(image_folder, tmp_path):
    root, _, _ = image_folder
    with pytest.raises(ValueError, match="--gzip_level must be an integer from 0"):
        run_images_job(root, str(tmp_path / "refused"), "--gzip_level=10")
    assert not os.path.exists(tmp_path / "refused")


@pytest.mark.parametrize("flags,level", [
    # Photo-sized JPEG and PNG records, compressed already: stored.
    (["--image_format=jpeg"], 0),
    (["--image_format=png"], 0),
    (["--image_format=jpeg", "--image_size=192"], 0),
    (["--image_format=png", "--image_size=64"], 0),
    # Small records, where the tables every JPEG repeats weigh, and raw pixels: deflated.
    (["--image_format=jpeg", "--image_size=191"], 6),
    (["--image_format=png", "--image_size=63"], 6),
    (["--image_format=raw"], 6),
    # The flag wins.
    (["--image_format=jpeg", "--gzip_level=6"], 6),
    (["--image_format=raw", "--gzip_level=0"], 0),
])
def test_images_job_default_gzip_level_follows_the_stored_records(image_folder, tmp_path,
                                                                  flags, level):
    from pipelines import images

    root, _, _ = image_folder
    options = images.ImagesOptions([f"--input={root}", f"--output_dir={tmp_path}", *flags])
    job = images.ImageJob.from_options(options)
    assert (job.output.gzip_level, job.describe_preprocessing()["gzip_level"]) == (
        level, level)


# --- Front door and withheld datasets ------------------------------------------------

def test_images_cli_reports_missing_input_flag(tmp_path, monkeypatch, root_logging):
    from pipelines import images

    exit_error = run_main(monkeypatch, images.run, [f"--output_dir={tmp_path}"])
    assert exit_error.code == "error: --input is required (see --help)."


def test_images_job_fails_without_train_examples(tmp_path):
    root = tmp_path / "in"
    for i in range(2):
        _write(str(root / f"{i}.png"), image_fixtures._encode("png", 5, 5, (i, 9, 9)))
    with open(root / "eval_only.csv", "w") as f:
        f.write("path,label,split\n0.png,cat,test\n1.png,dog,test\n")
    out = tmp_path / "out"
    with pytest.raises(accounting.EmptyTrainSplitError, match="train split is empty"):
        run_images_job(str(root / "eval_only.csv"), str(out))
    assert not (out / contract.MANIFEST_FILENAME).exists()


@pytest.fixture(scope="module")
def withheld_run(image_folder, tmp_path_factory):
    """A run whose shard step silently loses its last image: (output dir, the error)."""
    from etl.images import shards as image_shards

    real = image_shards.process_shard

    def losing_one(*args, **kwargs):
        yield from list(real(*args, **kwargs))[:-1]

    root, _, _ = image_folder
    out = str(tmp_path_factory.mktemp("withheld"))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(image_shards, "process_shard", losing_one)
        with pytest.raises(accounting.WithheldError) as info:
            run_images_job(root, out, "--max_error_fraction=0.5")
    return out, info.value


def test_images_job_raises_why_counts_do_not_reconcile(withheld_run):
    # inputs != written + rejected: the launcher raises the reason with its type.
    _, error = withheld_run
    assert type(error) is accounting.ReconciliationError
    assert "an input was lost" in str(error)


def test_images_job_withholds_a_dataset_whose_counts_do_not_reconcile(withheld_run):
    out, _ = withheld_run
    assert not os.path.exists(os.path.join(out, contract.MANIFEST_FILENAME))


def test_images_job_records_why_a_dataset_was_withheld(withheld_run):
    import json

    out, _ = withheld_run
    with open(os.path.join(out, contract.ERRORS_DIRNAME, "failure.json")) as f:
        assert json.load(f)["error"] == "ReconciliationError"


# --- Damaged JPEGs: dead letters, isolation inside a batch, lenient decoding ----------

def _photo_jpegs(count: int) -> dict[str, bytes]:
    """``count`` JPEG crops (q90) of scikit-learn's sample photos; key → bytes."""
    from PIL import Image
    from sklearn.datasets import load_sample_images

    photos = load_sample_images().images
    written = {}
    for i in range(count):
        crop = photos[i % 2][10 * i:10 * i + 200 + 9 * i, 20 * i:20 * i + 260 - 7 * i]
        buf = io.BytesIO()
        Image.fromarray(crop).save(buf, "JPEG", quality=90)
        written[f"photo/{i}.jpg"] = buf.getvalue()
    return written


# Train: 8 good photos and 3 whose entropy-coded data has 64 bytes overwritten (the
# silent kind: TensorFlow decodes them to smeared pixels). Validation: 4 good PNGs and
# a truncated JPEG, one shard, so one transform batch holds them all.
GOOD_PHOTOS = [f"photo/{i}.jpg" for i in range(8)]
DAMAGED_PHOTOS = [f"photo/{i}.jpg" for i in (8, 9, 10)]
GOOD_VALIDATION = [f"good/v{i}.png" for i in range(4)]
TRUNCATED = "bad/v-cut.jpg"
DAMAGE_FLAGS = ("--num_shards=1", "--image_format=png", "--max_error_fraction=0.5")


def _damaged_inputs(root: str) -> tuple[dict[str, bytes], dict[str, bytes]]:
    """Writes every input and the clean.csv / dirty.csv manifests; returns the damaged
    photos' intact and damaged bytes."""
    photos = _photo_jpegs(11)
    intact = {key: photos[key] for key in DAMAGED_PHOTOS}
    damaged = {key: image_fixtures.corrupt_mid_stream(intact[key], seed=seed)
               for seed, key in enumerate(DAMAGED_PHOTOS)}
    for key, data in {**photos, **damaged}.items():
        _write(os.path.join(root, key), data)
    for i, key in enumerate(GOOD_VALIDATION):
        _write(os.path.join(root, key),
               image_fixtures._encode("png", 6, 5, (20 * i, 7, 200 - 9 * i)))
    noise = np.random.default_rng(3).integers(0, 255, (48, 48, 3), dtype=np.uint8)
    jpeg = tf.io.encode_jpeg(noise).numpy()
    _write(os.path.join(root, TRUNCATED), jpeg[: len(jpeg) // 2])
    clean = [(k, "train") for k in GOOD_PHOTOS] + [(k, "validation") for k in GOOD_VALIDATION]
    dirty = clean + [(k, "train") for k in DAMAGED_PHOTOS] + [(TRUNCATED, "validation")]
    for name, rows in (("clean", clean), ("dirty", dirty)):
        with open(os.path.join(root, f"{name}.csv"), "w") as f:
            f.write("path,label,split\n")
            f.writelines(f"{key},photo,{split}\n" for key, split in rows)
    return intact, damaged


@pytest.fixture(scope="module")
def damage_runs(tmp_path_factory):
    """The job on the clean inputs, on the dirty ones, and on the dirty ones with
    --lenient_decoding: {name: (out, manifest)}, plus the intact and damaged bytes."""
    base = tmp_path_factory.mktemp("damage")
    root = str(base / "in")
    intact, damaged = _damaged_inputs(root)
    runs = {}
    for name, manifest_file, flags in (("clean", "clean.csv", ()),
                                       ("strict", "dirty.csv", ()),
                                       ("lenient", "dirty.csv", ("--lenient_decoding",))):
        out = str(base / name)
        runs[name] = out, run_images_job(os.path.join(root, manifest_file), out,
                                         *DAMAGE_FLAGS, *flags)
    return runs, intact, damaged


def test_mid_stream_damage_is_decoded_by_tensorflow_without_an_error(damage_runs):
    _, _, damaged = damage_runs
    for key, data in damaged.items():
        assert tf.io.decode_image(data).shape[-1] == 3, key


def test_images_job_rejects_damaged_and_truncated_jpegs_with_reasons(damage_runs):
    runs, _, _ = damage_runs
    rejected = rejected_records(runs["strict"][0])
    assert {r["key"]: r["reason"] for r in rejected} == {
        **dict.fromkeys(DAMAGED_PHOTOS, "corrupt_image_data"), TRUNCATED: "undecodable_image"}


def test_images_job_names_the_libjpeg_damage_in_the_message(damage_runs):
    runs, _, _ = damage_runs
    messages = {r["key"]: r["message"] for r in rejected_records(runs["strict"][0])}
    assert all(messages[key].startswith(
        "libjpeg reports damaged JPEG data: Corrupt JPEG data: ") for key in DAMAGED_PHOTOS)
    assert messages[TRUNCATED].startswith(
        "JPEG data ends before the image does (truncated): libjpeg: ")


def test_images_job_counts_damaged_jpegs_as_rejected(damage_runs):
    runs, _, _ = damage_runs
    manifest = runs["strict"][1]
    assert (manifest["inputs"], _written(manifest), manifest["rejected"]["by_reason"]) == (
        16, 12, {"corrupt_image_data": 3, "undecodable_image": 1})


def test_images_job_rejections_leave_the_good_shards_byte_identical(damage_runs):
    runs, _, _ = damage_runs
    assert shard_digests(runs["strict"][0]) == shard_digests(runs["clean"][0])
    assert runs["strict"][1]["splits"] == runs["clean"][1]["splits"]


def test_images_job_records_strict_or_lenient_decoding(damage_runs):
    runs, _, _ = damage_runs
    assert (runs["strict"][1]["preprocessing"]["strict_decoding"],
            runs["lenient"][1]["preprocessing"]["strict_decoding"]) == (True, False)


def test_images_job_isolates_an_undecodable_image_inside_a_transform_batch(damage_runs):
    # Lenient: the truncated JPEG passes the read checks and fails inside the
    # transform, batched with the good validation images; only it is a dead letter.
    runs, _, _ = damage_runs
    [rejected] = rejected_records(runs["lenient"][0])
    assert (rejected["key"], rejected["reason"]) == (TRUNCATED, "undecodable_image")
    assert rejected["message"].startswith("TensorFlow cannot decode this JPEG file: ")


def test_images_job_isolated_failure_leaves_its_batch_byte_identical(damage_runs):
    runs, _, _ = damage_runs

    def validation(out: str) -> dict[str, str]:
        return {p: d for p, d in shard_digests(out).items() if p.startswith("validation/")}

    assert validation(runs["lenient"][0]) == validation(runs["clean"][0]) != {}
    assert runs["lenient"][1]["splits"]["validation"] == runs["clean"][1]["splits"]["validation"]


def test_images_job_lenient_decoding_stores_damaged_pixels(damage_runs, tmp_path):
    runs, intact, _ = damage_runs
    out, manifest = runs["lenient"]
    rows = read_split(out, manifest, "train")
    assert sorted(rows) == sorted(GOOD_PHOTOS + DAMAGED_PHOTOS)
    for key, data in intact.items():  # Visibly broken pixels.
        _write(str(tmp_path / key), data)
        reference = _pillow_reference(str(tmp_path / key), TEST_IMAGE_SIZE)
        assert _psnr(tf.io.decode_png(rows[key]["image"]).numpy(), reference) < 25.0, key


def _keys_in_shard(prefix: str, shard: int, num_shards: int, count: int,
                   suffix: str = ".jpg") -> list[str]:
    from etl.core.shards import placement

    keys = (f"{prefix}{i}{suffix}" for i in range(10_000))
    return [k for k in keys if placement.shard_of(k, num_shards) == shard][:count]


@pytest.fixture(scope="module")
def all_rejected_shards_run(tmp_path_factory):
    # Validation, 2 shards: provisional shard 1 holds only truncated JPEGs (shard 0
    # the 4 good PNGs). Test: every record truncated.
    base = tmp_path_factory.mktemp("all_rejected")
    root = str(base / "in")
    good = _keys_in_shard("good/v", 0, 2, 4, suffix=".png")
    bad = [(k, "validation") for k in _keys_in_shard("bad/v", 1, 2, 2)]
    bad += [(k, "test") for k in _keys_in_shard("bad/t", 0, 2, 1)]
    bad += [(k, "test") for k in _keys_in_shard("bad/t", 1, 2, 1)]
    rows = [(f"good/t{i}.png", "train") for i in range(6)] + [(k, "validation") for k in good]
    for i, (key, _) in enumerate(rows):
        _write(os.path.join(root, key), image_fixtures._encode("png", 6, 5, (20 * i, 7, 9)))
    noise = np.random.default_rng(3).integers(0, 255, (48, 48, 3), dtype=np.uint8)
    jpeg = tf.io.encode_jpeg(noise).numpy()
    for key, _ in bad:
        _write(os.path.join(root, key), jpeg[: len(jpeg) // 2])
    with open(os.path.join(root, "manifest.csv"), "w") as f:
        f.write("path,label,split\n")
        f.writelines(f"{key},cat,{split}\n" for key, split in rows + bad)
    out = str(base / "out")
    return out, run_images_job(os.path.join(root, "manifest.csv"), out, "--num_shards=2",
                               "--max_error_fraction=0.5")


def test_images_job_renumbers_shards_after_dropping_an_all_rejected_one(
        all_rejected_shards_run):
    out, manifest = all_rejected_shards_run
    validation = manifest["splits"]["validation"]
    assert ([s["path"] for s in validation["shards"]], validation["num_records"]) == (
        ["validation/images-validation-00000-of-00001.tfrecord.gz"], 4)
    assert sorted(os.listdir(os.path.join(out, "validation"))) == [
        "images-validation-00000-of-00001.tfrecord.gz"]


def test_images_job_writes_no_shard_for_a_split_whose_records_are_all_rejected(
        all_rejected_shards_run):
    out, manifest = all_rejected_shards_run
    assert manifest["splits"]["test"] == {"num_records": 0, "num_bytes": 0, "shards": []}
    assert glob.glob(os.path.join(out, "test", "*")) == []


def test_images_job_dropped_shards_lose_nothing(all_rejected_shards_run):
    _, manifest = all_rejected_shards_run
    assert (manifest["inputs"], _written(manifest), manifest["rejected"]["by_reason"]) == (
        14, 10, {"undecodable_image": 4})


# --- Analysis ------------------------------------------------------------------------

def test_images_analysis_reads_only_the_label_column():
    from etl.core.transform.analysis import analyze_input_columns
    from etl.images import preprocessing as image_preprocessing

    assert analyze_input_columns(image_preprocessing.preprocessing_fn,
                                 image_preprocessing.RAW_FEATURE_SPEC) == ["label"]


def _image_reading(preprocessing_fn):
    """``preprocessing_fn`` plus an analyzer of the image bytes."""
    from etl.images import preprocessing as image_preprocessing

    def image_reading_fn(inputs, *, config=None, **options):
        outputs = preprocessing_fn(
            inputs, config=config or image_preprocessing.ImagePreprocessing(), **options)
        outputs["mean_length"] = tft.mean(tf.strings.length(inputs["image"]))
        return outputs

    return image_reading_fn


def test_analyze_input_columns_finds_an_analyzer_reading_the_image():
    from etl.core.transform.analysis import analyze_input_columns
    from etl.images import preprocessing as image_preprocessing

    image_reading_fn = _image_reading(image_preprocessing.preprocessing_fn)
    assert analyze_input_columns(image_reading_fn, image_preprocessing.RAW_FEATURE_SPEC) == [
        "image", "label"]


def test_images_job_refuses_a_preprocessing_fn_whose_analysis_reads_the_image(
        monkeypatch, tmp_path):
    # Analyzers' inputs are found by tracing preprocessing_fn; one that would read
    # the image bytes is refused when the pipeline is built.
    import apache_beam as beam

    from etl.images import preprocessing as image_preprocessing
    from pipelines import images

    monkeypatch.setattr(image_preprocessing, "preprocessing_fn",
                        _image_reading(image_preprocessing.preprocessing_fn))
    os.makedirs(tmp_path / "in" / "cat")
    job = images.ImageJob.from_options(images.ImagesOptions([
        f"--input={tmp_path / 'in'}", f"--output_dir={tmp_path / 'out'}"]))
    with pytest.raises(AssertionError, match="image bytes never enter the analysis"):
        images.build_pipeline(beam.Pipeline(), job)


# --- Photo content at 224 px: resize and crop, EXIF orientation, alpha ----------------

def _photo_crops(root: str) -> dict[str, tuple[int, int]]:
    """Crops of scikit-learn's two sample photos (427x640), JPEG q95, at varied sizes
    and aspect ratios, upscaled and downscaled by the job; key → (height, width)."""
    from PIL import Image
    from sklearn.datasets import load_sample_images

    photos = load_sample_images().images
    shapes = [(427, 640), (300, 180), (224, 224), (150, 400), (120, 90), (411, 333),
              (256, 600), (200, 201)]
    written = {}
    for i, (h, w) in enumerate(shapes):
        photo = photos[i % 2]
        top, left = (photo.shape[0] - h) // 3, (photo.shape[1] - w) // 4
        key = f"{'china' if i % 2 == 0 else 'flower'}/{i}-{h}x{w}.jpg"
        os.makedirs(os.path.join(root, os.path.dirname(key)), exist_ok=True)
        Image.fromarray(photo[top:top + h, left:left + w]).save(os.path.join(root, key),
                                                                quality=95)
        written[key] = (h, w)
    return written


def _oriented_photos(root: str) -> dict[str, int]:
    """A 300 x 420 (h x w) photo crop saved by Pillow as JPEG q95 with each EXIF
    orientation 1-8 (big-endian "MM" TIFF header, Pillow's default), and once more
    with orientation 6 in a little-endian "II" header; key -> orientation."""
    from PIL import Image
    from sklearn.datasets import load_sample_images

    photo = Image.fromarray(load_sample_images().images[0][60:360, 100:520])
    written = {}
    for orientation, endian in [*((o, ">") for o in range(1, 9)), (6, "<")]:
        exif = Image.Exif()
        exif.endian = endian
        exif[0x0112] = orientation
        key = f"photo/o{orientation}{'-le' if endian == '<' else ''}.jpg"
        os.makedirs(os.path.join(root, "photo"), exist_ok=True)
        photo.save(os.path.join(root, key), quality=95, exif=exif)
        written[key] = orientation
    return written


def _pillow_reference(path: str, size: int, exif_transpose: bool = False) -> np.ndarray:
    """The documented preprocessing, independently: Pillow decode (turned upright by
    Pillow's ``ImageOps.exif_transpose`` if asked), bilinear resize of the shorter
    side (antialiased when shrinking), centre crop."""
    from PIL import Image, ImageOps

    image = Image.open(path)
    if exif_transpose:
        image = ImageOps.exif_transpose(image)
    image = image.convert("RGB")
    w, h = image.size
    short = min(h, w)
    new_h, new_w = max(size, round(h * size / short)), max(size, round(w * size / short))
    resized = np.asarray(image.resize((new_w, new_h), Image.BILINEAR), dtype=np.float64)
    top, left = (new_h - size) // 2, (new_w - size) // 2
    return resized[top:top + size, left:left + size]


def _psnr(a: np.ndarray, b: np.ndarray) -> float:
    mse = float(np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2))
    return float("inf") if mse == 0 else 10 * np.log10(255.0 ** 2 / mse)


ALPHA_BACKGROUND = (255, 128, 0)
PHOTO_FLAGS = ("--image_size=224", "--image_format=png", "--split_fractions=1,0,0")


def _stored_photos(root: str, out: str, *flags: str) -> tuple[dict, dict[str, np.ndarray]]:
    """Runs the job at 224 px, lossless (PNG), every image in train; returns the
    manifest and each key's stored pixels."""
    manifest = run_images_job(root, out, *PHOTO_FLAGS, *flags)
    rows = read_split(out, manifest, "train")
    return manifest, {key: tf.io.decode_png(row["image"]).numpy() for key, row in rows.items()}


@pytest.fixture(scope="module")
def photo_run(tmp_path_factory):
    """One 224 px lossless run over photo crops, EXIF-oriented photos and the solid
    fixtures (translucent ones included) with --alpha_background: (root, crops,
    orientations, solid fixtures, manifest, stored pixels by key)."""
    base = tmp_path_factory.mktemp("photos")
    root = str(base / "in")
    crops = _photo_crops(root)
    orientations = _oriented_photos(root)
    solid = image_fixtures.write_image_folder(root, copies=1)
    manifest, stored = _stored_photos(root, str(base / "out"), "--alpha_background="
                                      + ",".join(map(str, ALPHA_BACKGROUND)))
    return root, crops, orientations, solid, manifest, stored


def test_images_job_stores_every_photo(photo_run):
    _, crops, orientations, solid, _, stored = photo_run
    assert sorted(stored) == sorted([*crops, *orientations, *(s.key for s in solid)])


def test_images_job_stores_photos_as_the_documented_resize_and_crop(photo_run):
    # Within a PSNR bound of Pillow's rendering of the documented rule (the two
    # libraries' bilinear filters and rounding differ slightly; a wrong crop offset,
    # scale or channel order drops PSNR far below the bound).
    root, crops, _, _, _, stored = photo_run
    for key in crops:
        assert stored[key].shape == (224, 224, 3), key
        assert _psnr(stored[key], _pillow_reference(os.path.join(root, key), 224)) > 30.0, key


def test_images_job_resize_and_crop_bound_rejects_an_off_centre_crop(photo_run):
    # The bound has teeth: a crop one eighth off-centre is far below it.
    root, crops, _, _, _, stored = photo_run
    for key in crops:
        shifted = np.roll(_pillow_reference(os.path.join(root, key), 224), 28, axis=1)
        assert _psnr(stored[key], shifted) < 25.0, key


def test_images_job_stores_exif_oriented_photos_upright(photo_run):
    root, _, orientations, _, _, stored = photo_run
    for key in orientations:
        reference = _pillow_reference(os.path.join(root, key), 224, exif_transpose=True)
        assert _psnr(stored[key], reference) > 30.0, key


def test_images_job_exif_bound_rejects_the_unturned_photo(photo_run):
    root, _, orientations, _, _, stored = photo_run
    for key, orientation in orientations.items():
        if orientation != 1:
            unturned = _pillow_reference(os.path.join(root, key), 224)
            assert _psnr(stored[key], unturned) < 20.0, key


def test_images_job_manifest_says_exif_orientation_is_applied(photo_run):
    preprocessing = photo_run[4]["preprocessing"]
    assert preprocessing["apply_exif_orientation"] is True
    assert preprocessing["exif_orientation"].startswith("applied")


def test_images_job_composites_alpha_on_the_background(photo_run):
    # Fixture RGBA PNG and WebP have alpha 77 everywhere over a solid colour: each
    # stored pixel is round((c * 77 + bg * 178) / 255); opaque images keep their colour.
    _, _, _, solid, _, stored = photo_run
    translucent = [s for s in solid if s.key.split("/")[1].split("-")[0]
                   in ("rgba", "webp_alpha")]
    assert len(translucent) == 2 * len(image_fixtures.LABELS)
    for image in solid:
        expected = np.array(image.rgb)
        if image in translucent:
            expected = np.floor((expected * 77 + np.array(ALPHA_BACKGROUND) * 178) / 255 + 0.5)
        tolerance = 3 if image.lossy else 0
        assert np.abs(stored[image.key].astype(int) - expected).max() <= tolerance, image.key


def test_images_job_manifest_records_the_alpha_background(photo_run):
    preprocessing = photo_run[4]["preprocessing"]
    assert preprocessing["alpha_background"] == list(ALPHA_BACKGROUND)
    assert "alpha composited" in preprocessing["color"]


def test_images_job_refuses_an_alpha_background_that_is_not_rgb(image_folder, tmp_path):
    root, _, _ = image_folder
    with pytest.raises(ValueError, match="--alpha_background must be R,G,B"):
        run_images_job(root, str(tmp_path / "refused"), "--alpha_background=white")


@pytest.fixture(scope="module")
def unturned_run(tmp_path_factory):
    base = tmp_path_factory.mktemp("unturned")
    root = str(base / "in")
    orientations = _oriented_photos(root)
    manifest, stored = _stored_photos(root, str(base / "out"), "--ignore_exif_orientation")
    return root, orientations, manifest, stored


def test_images_job_ignore_exif_orientation_keeps_the_stored_pixel_order(unturned_run):
    root, orientations, _, stored = unturned_run
    for key in orientations:
        reference = _pillow_reference(os.path.join(root, key), 224)
        assert _psnr(stored[key], reference) > 30.0, key


def test_images_job_manifest_says_exif_orientation_is_ignored(unturned_run):
    preprocessing = unturned_run[2]["preprocessing"]
    assert preprocessing["apply_exif_orientation"] is False
    assert preprocessing["exif_orientation"].startswith("ignored")


# --- Threads per op ------------------------------------------------------------------

def test_images_job_runs_ops_on_one_thread_each_unless_told_otherwise(monkeypatch):
    from pipelines import worker_start

    monkeypatch.delenv(worker_start.INTRA_OP_THREADS_ENV, raising=False)
    worker_start.run_ops_on_one_thread_each()
    assert os.environ[worker_start.INTRA_OP_THREADS_ENV] == "1"


def test_images_job_keeps_the_users_threads_per_op(monkeypatch):
    from pipelines import worker_start

    monkeypatch.setenv(worker_start.INTRA_OP_THREADS_ENV, "0")
    worker_start.run_ops_on_one_thread_each()
    assert os.environ[worker_start.INTRA_OP_THREADS_ENV] == "0"


def test_every_harness_of_the_image_job_starts_with_one_thread_per_op():
    # A harness on a cluster's host or a Dataflow worker starts with its host's
    # environment: the job names pipelines.worker_start among Beam's --beam_plugins,
    # which Beam's harness entry point imports as it starts.
    from apache_beam.options.pipeline_options import PipelineOptions, SetupOptions

    from pipelines import images

    options = PipelineOptions(["--beam_plugins=other.plugin"])
    images.start_workers_as_this_process(options)
    assert options.view_as(SetupOptions).beam_plugins == ["other.plugin", images.WORKER_START]
    env = {k: v for k, v in os.environ.items() if k != "TF_NUM_INTRAOP_THREADS"}
    started = subprocess.run(
        [sys.executable, "-c",
         ("import os; from apache_beam.runners.worker import sdk_worker_main as m; "
          f"m._import_beam_plugins([{images.WORKER_START!r}]); "
          "print(os.environ['TF_NUM_INTRAOP_THREADS'])")],
        env=env, capture_output=True, text=True, check=True)
    assert started.stdout.strip() == "1"


def test_images_job_is_byte_identical_with_any_number_of_threads_per_op(tmp_path):
    # TensorFlow reads the thread count when it starts, so each run is a process of
    # its own (both run at once): 1 is the job's default; 3 is several threads on any
    # machine.
    from pipelines import worker_start

    root = str(tmp_path / "photos")
    _photo_crops(root)
    started = {threads: start_job("images", f"--input={root}",
                                  f"--output_dir={tmp_path / f'out{threads}'}",
                                  "--split_fractions=0.5,0.25,0.25",
                                  env={worker_start.INTRA_OP_THREADS_ENV: threads})
               for threads in ("1", "3")}
    digests = []
    for threads, process in started.items():
        _, stderr = process.communicate(timeout=300)
        assert process.returncode == 0, stderr[-2000:]
        digests.append(output_digests(str(tmp_path / f"out{threads}")))
    assert digests[0] == digests[1]
    assert any(path.endswith(contract.SHARD_SUFFIX) for path in digests[0])
