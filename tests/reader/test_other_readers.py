"""PyTorch, JAX/Grain and TFDS read what the jobs write with --compression=none:
``reader.records.ShardedRecords`` (random access without TensorFlow, a Grain data
source and a PyTorch map-style Dataset) and ``python -m reader.export_tfds``, on real
job output. One module, so that both readers' tests share its job runs."""

from __future__ import annotations

import concurrent.futures
import json
import multiprocessing
import os
import pickle
import shlex
import shutil
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_datasets as tfds

import reader
from reader import verify
from reader.export_tfds import accurate_jpeg_decoders, export_tfds, main
from reader.format import contract
from reader.format.contract import DatasetError
from reader.records import ShardedRecords
from scripts.checks.tf_free_reader import reader_md_snippet
from tests import image_fixtures
from tests.job_runs import files_under, output_digests, run_images_job
from tests.reader import records_worker
from tests.reader.helpers import (
    FORECAST_HORIZON,
    FORECAST_WINDOW,
    REPO_ROOT,
    flip_byte_in_middle,
    write_jsonl,
)

NONE = "--compression=none"
TAGS = ["cat", "dog", "sky"]
NUM_PHOTOS = 36
IMAGE_SIZE = 32
IMAGE_FLAGS = (NONE, f"--image_size={IMAGE_SIZE}", "--num_shards=2",
               "--cross_split_duplicates=report")
UNSEEN_TAG = "zebra"  # only on validation rows: stored as label -1
# contract.STORED_JPEG_DCT_METHOD: TensorFlow's fast IDCT is up to 18 levels off.
FAST_IDCT_MAX_DIFF = 18


def _write_photos(root: str) -> list[dict]:
    """Textured JPEGs (real entropy-coded data, not flat colours) in three class
    folders under ``root/photos``, and their rows for the multi-label run's JSONL
    (beside the folder, not in it): tag sets, a class only some validation rows
    have, a carried caption."""
    rows = []
    for i in range(NUM_PHOTOS):
        label = TAGS[i % 3]
        path = f"photos/{label}/{i:03d}.jpg"
        os.makedirs(os.path.join(root, "photos", label), exist_ok=True)
        with open(os.path.join(root, path), "wb") as f:
            f.write(image_fixtures.textured_jpeg(40, 48, seed=i))
        unseen = i % 8 == 7
        rows.append({"path": path, "caption": f"scan {i} \u2713",
                     "tags": [t for j, t in enumerate(TAGS) if (i >> j) & 1]
                     + [UNSEEN_TAG] * unseen,
                     "split": "validation" if unseen else ""})
    return rows


@pytest.fixture(scope="module")
def photos(tmp_path_factory) -> tuple[str, list[dict]]:
    root = str(tmp_path_factory.mktemp("photos"))
    return root, _write_photos(root)


@pytest.fixture(scope="module")
def images(photos, tmp_path_factory) -> str:
    """JPEG classification by folder, two shards per split."""
    out = str(tmp_path_factory.mktemp("images_none"))
    run_images_job(os.path.join(photos[0], "photos"), out, *IMAGE_FLAGS)
    return out


@pytest.fixture(scope="module")
def multi_label(photos, tmp_path_factory) -> str:
    """Tag sets (a class only validation has: id -1), raw pixels, a carried caption."""
    root, rows = photos
    manifest = write_jsonl(os.path.join(root, "tags.jsonl"), rows)
    out = str(tmp_path_factory.mktemp("multi_label_none"))
    run_images_job(manifest, out, *IMAGE_FLAGS, "--multi_label", "--label_column=tags",
                   "--carry_columns=caption", "--image_format=raw")
    return out


@pytest.fixture(scope="module")
def series(tmp_path_factory) -> str:
    """Two ramps; the test split is empty (fraction 0)."""
    from pipelines import timeseries

    root = tmp_path_factory.mktemp("series_none")
    rows = [{"series_id": sid, "timestamp": t, "value": float(t * slope)}
            for sid, slope in (("up", 1), ("down", -2)) for t in range(100)]
    out = str(root / "out")
    timeseries.run([f"--input={write_jsonl(str(root / 'rows.jsonl'), rows)}",
                    f"--output_dir={out}", f"--window_size={FORECAST_WINDOW}",
                    f"--horizon={FORECAST_HORIZON}", "--split_fractions=0.8,0.2,0",
                    "--num_shards=2", NONE])
    return out


@pytest.fixture(scope="module")
def exported(images, multi_label, series) -> tuple[str, list[str]]:
    """``python -m reader.export_tfds`` run on the three datasets: (the image
    dataset, its files before the export)."""
    before = files_under(images)
    for data_dir in (images, multi_label, series):
        export_tfds(data_dir)
    return images, before


# --- ShardedRecords ------------------------------------------------------------

def _stored_in_file_order(data_dir: str, split: str) -> list[dict]:
    """Every record of ``split`` parsed by TensorFlow, shards in manifest order."""
    info = reader.open_dataset(data_dir)
    records = tf.data.TFRecordDataset(info.shard_paths(split), compression_type="")
    return [{k: v.numpy() for k, v in tf.io.parse_single_example(r, info.feature_spec
                                                                 ).items()}
            for r in records]


def _make_dataset_by_key(data_dir: str, split: str, features: list[str]) -> dict:
    dataset = reader.make_dataset(data_dir, split, batch_size=1000, shuffle=False,
                                  features=[*features, "key"])
    found = {}
    for inputs, labels in dataset:
        for i, key in enumerate(inputs["key"].numpy()):
            found[key.decode()] = ({f: np.asarray(inputs[f][i]) for f in features},
                                   np.asarray(labels[i]))
    return found


def test_index_i_is_the_ith_record_of_the_split_in_manifest_order(images):
    for split in ("train", "validation", "test"):
        records = ShardedRecords(images, split)
        stored = _stored_in_file_order(images, split)
        assert len(records) == len(stored) == reader.open_dataset(images).num_records(split)
        assert [records[i]["key"] for i in range(len(records))] == [
            s["key"].decode() for s in stored]
        assert records[-1]["key"] == stored[-1]["key"].decode()


def test_images_and_labels_equal_make_datasets(images):
    expected = _make_dataset_by_key(images, "train", ["image"])
    records = ShardedRecords(images, "train")
    vocab = reader.open_dataset(images).label_vocab
    assert len(expected) == len(records)
    for i in range(len(records)):
        item = records[i]
        image, label = expected[item["key"]]
        assert item["image"].dtype == np.uint8
        assert item["image"].shape == (IMAGE_SIZE, IMAGE_SIZE, 3)
        # make_dataset scales the decoded uint8 pixels to [0, 1].
        np.testing.assert_array_equal(item["image"],
                                      np.round(image["image"] * 255).astype(np.uint8))
        assert item["label"] == label
        assert item["label_name"] == vocab[int(label)] == item["key"].split("/")[0]
        assert isinstance(item["key"], str)


def test_multi_label_sets_are_make_datasets_multi_hot(multi_label):
    expected = _make_dataset_by_key(multi_label, "train", ["label_name"])
    records = ShardedRecords(multi_label, "train")
    vocab = reader.open_dataset(multi_label).label_vocab
    for i in range(len(records)):
        item = records[i]
        _, hot = expected[item["key"]]
        np.testing.assert_array_equal(item["label"], hot)
        assert sorted(item["label_name"]) == sorted(
            vocab[j] for j in np.flatnonzero(hot))


def test_time_series_windows_and_targets_equal_make_datasets(series):
    records = ShardedRecords(series, "train")
    by_key = {}
    for window, target in reader.make_dataset(series, "train", batch_size=1000,
                                              shuffle=False):
        by_key.update({tuple(np.asarray(w).ravel()): np.asarray(t)
                       for w, t in zip(window, target, strict=True)})
    assert len(records) == len(by_key) > 0
    for i in range(len(records)):
        item = records[i]
        assert item["window"].shape == (FORECAST_WINDOW, 1)
        np.testing.assert_array_equal(item["target"], by_key[tuple(item["window"].ravel())])


def test_threads_read_what_one_thread_reads(images):
    records = ShardedRecords(images, "train", features=["key", "image"])
    sequential = [records[i] for i in range(len(records))]
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        threaded = list(pool.map(records.__getitem__, range(len(records))))
    for a, b in zip(sequential, threaded, strict=True):
        assert a["key"] == b["key"]
        np.testing.assert_array_equal(a["image"], b["image"])


def test_dataloader_protocol_two_worker_processes_read_every_record_once(images):
    """What ``DataLoader(dataset, batch_size=4, shuffle=True, num_workers=2)`` does:
    the main process draws a permutation, cuts it into batches and hands them to
    the workers in turn; each worker holds the dataset unpickled ("spawn") and
    calls ``__getitem__`` for each index."""
    records = ShardedRecords(images, "train", features=["key"])
    order = np.random.default_rng(0).permutation(len(records)).tolist()
    batches = [order[i:i + 4] for i in range(0, len(order), 4)]
    pickled = pickle.dumps(records)
    context = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(2, mp_context=context) as pool:
        results = list(pool.map(records_worker.read_keys, [pickled] * 2,
                                [batches[0::2], batches[1::2]]))
    keys = results[0][0] + results[1][0]
    expected = [s["key"].decode() for s in _stored_in_file_order(images, "train")]
    assert sorted(keys) == sorted(expected) and len(set(keys)) == len(expected)
    assert not any(imported_tf for _, imported_tf in results)


def test_grain_shuffles_every_key_once_and_resumes_from_a_checkpoint_elsewhere(images):
    expected = sorted(s["key"].decode() for s in _stored_in_file_order(images, "train"))
    epoch, _ = records_worker.grain_keys(images, 0, None)
    assert sorted(epoch) == expected and epoch != expected
    rest, state = records_worker.grain_keys(images, 7, None)
    assert rest == epoch[7:]
    fresh = subprocess.run(
        [sys.executable, "-m", "tests.reader.records_worker", images, json.dumps(state)],
        cwd=REPO_ROOT, capture_output=True, text=True, check=True)
    restored = json.loads(fresh.stdout.splitlines()[-1])
    assert restored["keys"] == epoch[7:]
    assert restored["pid"] != os.getpid() and not restored["tensorflow"]


def test_a_damaged_record_fails_its_crc_naming_file_and_offset(images, tmp_path):
    copy = str(tmp_path / "copy")
    shutil.copytree(images, copy)
    shard = reader.open_dataset(copy).shard_paths("train")[0]
    flip_byte_in_middle(shard)
    records = ShardedRecords(copy, "train")
    with pytest.raises(DatasetError, match=r"fails its CRC check") as failure:
        for i in range(len(records)):
            records[i]
    assert shard in str(failure.value) and "at byte" in str(failure.value)
    assert any("fails its CRC check" in p for _, p in verify.find_damaged_shards(copy))


def test_an_altered_or_missing_record_index_is_refused_and_verify_names_it(images, tmp_path):
    copy = str(tmp_path / "copy")
    shutil.copytree(images, copy)
    index = reader.open_dataset(copy).shard_paths("test")[0] + ".idx"
    with open(index, "a") as f:
        f.write("0 16\n")
    with pytest.raises(DatasetError, match=r"Record index .* does not match the sha256"):
        ShardedRecords(copy, "test")
    assert [path for path, _ in verify.find_damaged_shards(copy)] == [index[:-4]]
    assert verify.find_damaged_shards(images) == []


def test_gzip_datasets_and_unknown_names_get_one_clear_error(images, tmp_path):
    # A GZIP dataset's manifest: the same, with the compression a gzip run records
    # (or none at all, as before --compression existed).
    manifest = reader.open_dataset(images).manifest
    for compression in ("gzip", None):
        gzip_dir = tmp_path / f"gzip_{compression}"
        gzip_dir.mkdir()
        written = {**manifest, "compression": compression}
        if compression is None:
            del written["compression"]
        (gzip_dir / "manifest.json").write_text(json.dumps(written))
        with pytest.raises(DatasetError, match="rebuild it with --compression=none"):
            ShardedRecords(str(gzip_dir), "train")
    with pytest.raises(ValueError, match="Unknown split 'valid'"):
        ShardedRecords(images, "valid")
    with pytest.raises(ValueError, match=r"Unknown features \['pixels'\]"):
        ShardedRecords(images, "train", features=["pixels"])
    with pytest.raises(IndexError):
        ShardedRecords(images, "test")[10_000]


def test_reads_all_three_kinds_in_a_process_that_cannot_import_tensorflow(
        images, multi_label, series):
    script = ("import sys; sys.modules['tensorflow'] = None\n"
              "from reader.records import ShardedRecords\n"
              "for d in sys.argv[1:]:\n"
              "    r = ShardedRecords(d, 'train'); item = r[len(r) - 1]\n"
              "    print(len(r), sorted(item))\n")
    done = subprocess.run([sys.executable, "-c", script, images, multi_label, series],
                          cwd=REPO_ROOT, capture_output=True, text=True, check=True)
    lines = done.stdout.splitlines()
    assert [int(line.split()[0]) for line in lines] == [
        reader.open_dataset(d).num_records("train") for d in (images, multi_label, series)]
    assert "'window'" in lines[2] and "'image'" in lines[0]


def test_uncompressed_output_is_byte_identical_on_two_workers(photos, images, tmp_path):
    out = str(tmp_path / "two_workers")
    run_images_job(os.path.join(photos[0], "photos"), out, *IMAGE_FLAGS,
                   "--direct_num_workers=2", "--direct_running_mode=multi_threading")
    digests = output_digests(out)
    assert digests == output_digests(images)
    shards = [s for e in reader.open_dataset(out).manifest["splits"].values()
              for s in e["shards"]]
    assert sum(path.endswith(".idx") for path in digests) == len(shards) >= 4


def test_readers_tf_free_install_command_installs_setup_pys_records_requires():
    from scripts.checks.tf_free_reader import install_command
    from tests.test_layout import _setup_constant

    packages = shlex.split(install_command())[2:]
    assert packages[:2] == ["--no-deps", "."]
    assert packages[2:] == _setup_constant("RECORDS_REQUIRES")
    assert _setup_constant("EXTRAS_REQUIRE")["records"] == _setup_constant("RECORDS_REQUIRES")


# --- TFDS ----------------------------------------------------------------------

def _manifest(data_dir: str) -> dict:
    with open(os.path.join(data_dir, contract.MANIFEST_FILENAME)) as f:
        return json.load(f)


def _tfds_rows(data_dir: str, split: str, **kwargs) -> list[dict]:
    builder = tfds.builder_from_directory(data_dir)
    return list(tfds.as_numpy(builder.as_dataset(split=split, shuffle_files=False,
                                                 **kwargs)))


def _keys(rows: list[dict]) -> list[str]:
    return [row["key"].decode() for row in rows]


def _ours(data_dir: str, split: str) -> dict[str, dict]:
    """Our reader's records of ``split`` by key, in index order (shard by shard)."""
    records = ShardedRecords(data_dir, split)
    return {item["key"]: item for item in (records[i] for i in range(len(records)))}


# --- TFDS: JPEG classification -----------------------------------------------------------------


def test_export_tfds_writes_only_tfds_metadata_and_reruns(exported):
    out, before = exported
    assert export_tfds(out) == os.path.join(out, "dataset_info.json")
    assert sorted(set(files_under(out)) - set(before)) == [
        "dataset_info.json", "features.json", "label.labels.txt"]
    assert set(before) <= set(files_under(out))


def test_export_tfds_split_lengths_equal_the_manifest(exported):
    out, _ = exported
    splits = tfds.builder_from_directory(out).info.splits
    manifest = _manifest(out)
    assert {name: splits[name].num_examples for name in splits.keys()} == {
        split: entry["num_records"] for split, entry in manifest["splits"].items()}
    assert {name: splits[name].num_shards for name in splits.keys()} == {
        split: len(entry["shards"]) for split, entry in manifest["splits"].items()}
    assert len(manifest["splits"]["train"]["shards"]) == 2


def test_export_tfds_reads_every_key_exactly_once(exported):
    out, _ = exported
    keys = [key for split in contract.SPLITS for key in _keys(_tfds_rows(out, split))]
    assert len(keys) == len(set(keys)) == NUM_PHOTOS
    for split in contract.SPLITS:
        assert sorted(_keys(_tfds_rows(out, split))) == sorted(_ours(out, split))


def test_export_tfds_sub_splits_are_the_records_at_those_indices(exported):
    out, _ = exported
    train = list(_ours(out, "train"))
    assert len(train) % 10 != 5  # No tie in TFDS's rounding of the boundary.
    tenth = _keys(_tfds_rows(out, "train[:10%]"))
    assert sorted(tenth) == sorted(train[:round(len(train) / 10)])
    assert sorted(_keys(_tfds_rows(out, "train[-3:]"))) == sorted(train[-3:])


def test_export_tfds_accurate_jpeg_decoders_give_the_reader_pixels(exported):
    out, _ = exported
    for split in contract.SPLITS:
        ours = _ours(out, split)
        for row in _tfds_rows(out, split, decoders=accurate_jpeg_decoders()):
            assert row["image"].shape == (IMAGE_SIZE, IMAGE_SIZE, 3)
            np.testing.assert_array_equal(row["image"], ours[row["key"].decode()]["image"])


def test_export_tfds_default_jpeg_decode_is_a_few_levels_off(exported):
    out, _ = exported
    ours = _ours(out, "train")
    diffs = [int(np.abs(row["image"].astype(int) - ours[row["key"].decode()]["image"]).max())
             for row in _tfds_rows(out, "train")]
    assert 0 < max(diffs) <= FAST_IDCT_MAX_DIFF


def test_export_tfds_class_labels_are_the_label_vocab(exported):
    out, _ = exported
    vocab = _manifest(out)["label_vocab"]
    assert tfds.builder_from_directory(out).info.features["label"].names == vocab
    with open(os.path.join(out, "label.labels.txt")) as f:
        assert f.read().splitlines() == vocab
    ours = _ours(out, "train")
    for row in _tfds_rows(out, "train"):
        item = ours[row["key"].decode()]
        assert (row["label"], row["label_name"].decode()) == (item["label"],
                                                              item["label_name"])
        assert vocab[row["label"]] == item["label_name"]


def test_export_tfds_as_supervised_gives_image_and_label(exported):
    out, _ = exported
    pairs = _tfds_rows(out, "test", as_supervised=True)
    labels = [row["label"] for row in _tfds_rows(out, "test")]
    assert [label for _, label in pairs] == labels
    assert all(image.shape == (IMAGE_SIZE, IMAGE_SIZE, 3) for image, _ in pairs)


def test_main_prints_how_to_load_and_exits_0(exported, capsys):
    out, _ = exported
    assert main([out]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert len(printed) == 1
    assert f"tfds.builder_from_directory({out!r})" in printed[0]
    assert "accurate_jpeg_decoders()" in printed[0] and "int2str(-1)" in printed[0]


def _append_version_2(data_dir: str) -> int:
    """Makes ``data_dir`` look appended to: train shard 0 again, as version 2's only
    shard. Returns its record count."""
    manifest = _manifest(data_dir)
    train = manifest["splits"]["train"]
    shard = dict(train["shards"][0])
    path = "train/images-v2-train-00000-of-00001.tfrecord"
    for old, new in ((shard["path"], path), (shard["index"]["path"], f"{path}.idx")):
        shutil.copy(os.path.join(data_dir, old), os.path.join(data_dir, new))
    shard["path"], shard["index"] = path, {**shard["index"], "path": f"{path}.idx"}
    train["shards"].append(shard)
    train["num_records"] += shard["num_records"]
    train["num_bytes"] += shard["num_bytes"]
    manifest["dataset_version"] = 2
    with open(os.path.join(data_dir, contract.MANIFEST_FILENAME), "w") as f:
        f.write(contract.dumps_manifest(manifest))
    return shard["num_records"]


def test_export_tfds_appended_version_is_a_split_of_its_own(exported, tmp_path,
                                                            capsys):
    out = str(tmp_path / "appended")
    shutil.copytree(exported[0], out)
    first = list(_ours(out, "train"))
    added = _append_version_2(out)
    assert main([out]) == 0
    assert "split='train+train_v2'" in capsys.readouterr().out
    builder = tfds.builder_from_directory(out)
    assert builder.info.splits["train_v2"].num_examples == added
    assert str(builder.info.version) == "2.0.0"
    both = _keys(_tfds_rows(out, "train+train_v2"))
    assert sorted(both) == sorted(first + first[:added])  # Shard 0's keys twice.
    assert len(both) == _manifest(out)["splits"]["train"]["num_records"]


def test_export_tfds_refuses_a_shard_named_by_hand(exported, tmp_path):
    out = str(tmp_path / "renamed")
    shutil.copytree(exported[0], out)
    manifest = _manifest(out)
    shard = manifest["splits"]["test"]["shards"][0]
    os.rename(os.path.join(out, shard["path"]), os.path.join(out, "test/mine.tfrecord"))
    shard["path"] = "test/mine.tfrecord"
    with open(os.path.join(out, contract.MANIFEST_FILENAME), "w") as f:
        f.write(contract.dumps_manifest(manifest))
    with pytest.raises(DatasetError, match=r"'test/mine.tfrecord' of split 'test' is not"):
        export_tfds(out)


# --- Time series -------------------------------------------------------------------------


def test_export_tfds_forecast_blocks_equal_the_reader_records(series, exported):
    manifest = _manifest(series)
    for split in ("train", "validation"):
        ours = _ours(series, split)
        rows = _tfds_rows(series, split)
        assert len(rows) == manifest["splits"][split]["num_records"] == len(ours) > 0
        for row in rows:
            item = ours[row["key"].decode()]
            assert row["window"].shape == tuple(manifest["features"]["window"]["shape"])
            assert row["target"].shape == tuple(manifest["features"]["target"]["shape"])
            np.testing.assert_array_equal(row["window"], item["window"])
            np.testing.assert_array_equal(row["target"], item["target"])
            assert row["series_id"].decode() == item["series_id"]


def test_export_tfds_leaves_out_an_empty_split(series, exported, capsys):
    assert _manifest(series)["splits"]["test"]["num_records"] == 0
    assert list(tfds.builder_from_directory(series).info.splits.keys()) == [
        "train", "validation"]
    assert main([series]) == 0
    assert "empty splits left out (TFDS cannot read one): test" in capsys.readouterr().out


# --- Multi-label, raw images -------------------------------------------------------------


def test_export_tfds_multi_label_sets_keep_their_ids_and_minus_one(multi_label, exported):
    vocab = _manifest(multi_label)["label_vocab"]
    label = tfds.builder_from_directory(multi_label).info.features["label"]
    assert label.feature.names == vocab
    seen_unseen = False
    for split in contract.SPLITS:
        ours = _ours(multi_label, split)
        for row in _tfds_rows(multi_label, split):
            item = ours[row["key"].decode()]
            names = [name.decode() for name in row["label_name"]]
            assert names == item["label_name"]
            assert [vocab[i] if i >= 0 else UNSEEN_TAG for i in row["label"]] == names
            assert sorted(i for i in row["label"] if i >= 0) == np.flatnonzero(
                item["label"]).tolist()
            seen_unseen |= -1 in row["label"].tolist()
    assert seen_unseen


def test_export_tfds_raw_images_and_carried_text_are_exact(multi_label, exported):
    for split in contract.SPLITS:
        ours = _ours(multi_label, split)
        for row in _tfds_rows(multi_label, split):
            item = ours[row["key"].decode()]
            assert row["image"].dtype == np.uint8
            np.testing.assert_array_equal(row["image"], item["image"])
            assert row["caption"].decode() == item["caption"]


# --- Refusals ----------------------------------------------------------------------------


def _gzip_manifest(data_dir: str) -> None:
    """A finished-looking GZIP dataset (no ``compression``: GZIP) with no shards."""
    fixed = {"kind": "fixed_len", "shape": []}
    manifest = {"format_version": 1, "name": "images", "kind": "images",
                "task": "classification", "label_vocab": ["a"],
                "features": {"image": {**fixed, "dtype": "string"},
                             "label": {**fixed, "dtype": "int64"}},
                "preprocessing": {"image_size": 8, "image_format": "jpeg"},
                "splits": {"train": {"num_records": 0, "num_bytes": 0, "shards": []}}}
    with open(os.path.join(data_dir, contract.MANIFEST_FILENAME), "w") as f:
        f.write(contract.dumps_manifest(manifest))


def test_export_tfds_refuses_gzip_shards(tmp_path):
    _gzip_manifest(str(tmp_path))
    with pytest.raises(DatasetError, match=r"GZIP.*rebuild it with --compression=none"):
        export_tfds(str(tmp_path))
    assert files_under(str(tmp_path)) == [contract.MANIFEST_FILENAME]


def test_main_exits_2_with_one_line_on_error(tmp_path, capsys):
    _gzip_manifest(str(tmp_path))
    assert main([str(tmp_path)]) == 2
    assert main([str(tmp_path / "missing")]) == 2
    errors = capsys.readouterr().err.splitlines()
    assert len(errors) == 2
    assert "--compression=none" in errors[0] and "No manifest.json" in errors[1]


# --- READER.md's snippets -------------------------------------------------------------


def test_readers_grain_snippet_runs_as_written(images):
    namespace: dict = {}
    exec(reader_md_snippet("From JAX / Grain").replace("out/images", images), namespace)
    batch, state = namespace["batch"], namespace["state"]
    train = reader.open_dataset(images).num_records("train")
    assert batch["image"].shape == (min(64, train), IMAGE_SIZE, IMAGE_SIZE, 3)
    assert batch["image"].dtype == np.uint8 and batch["label"].shape == (min(64, train),)
    json.dumps(state)


def test_readers_tfds_snippet_runs_as_written(exported):
    out, _ = exported
    namespace: dict = {}
    exec(reader_md_snippet("From TFDS").replace("out/images", out), namespace)
    rows = list(tfds.as_numpy(namespace["train"]))
    assert len(rows) == round(reader.open_dataset(out).num_records("train") / 10) > 0
    assert rows[0]["image"].shape == (IMAGE_SIZE, IMAGE_SIZE, 3)
