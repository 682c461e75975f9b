"""reader.records.ShardedRecords: random access without TensorFlow, as Grain and
PyTorch read a data source, on real job output written with --compression=none."""

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

import reader
from reader import verify
from reader.contract import DatasetError
from reader.records import ShardedRecords
from tests import image_fixtures
from tests.job_runs import output_digests, run_images_job
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


def _write_photos(root: str, count: int = 36) -> list[dict]:
    """Textured JPEGs (real entropy-coded data, not flat colours) in three class
    folders under ``root/photos``, and their rows with tag sets for the multi-label
    run's JSONL (beside the folder, not in it)."""
    rows = []
    for i in range(count):
        label = TAGS[i % 3]
        path = f"photos/{label}/{i:03d}.jpg"
        os.makedirs(os.path.join(root, "photos", label), exist_ok=True)
        with open(os.path.join(root, path), "wb") as f:
            f.write(image_fixtures.textured_jpeg(40, 48, seed=i))
        rows.append({"path": path, "tags": [t for j, t in enumerate(TAGS) if (i >> j) & 1]})
    return rows


@pytest.fixture(scope="module")
def photos(tmp_path_factory) -> tuple[str, list[dict]]:
    root = str(tmp_path_factory.mktemp("photos"))
    return root, _write_photos(root)


@pytest.fixture(scope="module")
def images(photos, tmp_path_factory) -> str:
    out = str(tmp_path_factory.mktemp("images_none"))
    run_images_job(os.path.join(photos[0], "photos"), out, NONE, "--image_size=32",
                   "--num_shards=3")
    return out


@pytest.fixture(scope="module")
def multi_label(photos, tmp_path_factory) -> str:
    root, rows = photos
    manifest = write_jsonl(os.path.join(root, "tags.jsonl"), rows)
    out = str(tmp_path_factory.mktemp("multi_label_none"))
    run_images_job(manifest, out, NONE, "--multi_label", "--label_column=tags",
                   "--image_format=png", "--num_shards=2")
    return out


@pytest.fixture(scope="module")
def series(tmp_path_factory) -> str:
    from pipelines import timeseries

    root = tmp_path_factory.mktemp("series_none")
    rows = [{"series_id": f"s{s}", "timestamp": t, "value": float(t * (s + 1))}
            for s in range(3) for t in range(60)]
    path = write_jsonl(str(root / "rows.jsonl"), rows)
    out = str(root / "out")
    timeseries.run([f"--input={path}", f"--output_dir={out}", NONE,
                    f"--window_size={FORECAST_WINDOW}", f"--horizon={FORECAST_HORIZON}"])
    return out


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
        assert item["image"].dtype == np.uint8 and item["image"].shape == (32, 32, 3)
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


def test_gzip_datasets_and_unknown_names_get_one_clear_error(png_dataset, images):
    gzip_dir, _ = png_dataset
    with pytest.raises(DatasetError, match="rebuild it with --compression=none"):
        ShardedRecords(gzip_dir, "train")
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
    run_images_job(os.path.join(photos[0], "photos"), out, NONE, "--image_size=32",
                   "--num_shards=3", "--direct_num_workers=2",
                   "--direct_running_mode=multi_threading")
    digests = output_digests(out)
    assert digests == output_digests(images)
    shards = [s for e in reader.open_dataset(out).manifest["splits"].values()
              for s in e["shards"]]
    assert sum(path.endswith(".idx") for path in digests) == len(shards) > 3


def test_readers_tf_free_install_command_installs_setup_pys_records_requires():
    from scripts.check_tf_free_reader import install_command
    from tests.test_layout import _setup_constant

    packages = shlex.split(install_command())[2:]
    assert packages[:2] == ["--no-deps", "."]
    assert packages[2:] == _setup_constant("RECORDS_REQUIRES")
    assert _setup_constant("EXTRAS_REQUIRE")["records"] == _setup_constant("RECORDS_REQUIRES")
