"""Tests of reader.export_tfds: TFDS reads our uncompressed datasets in place.

Three job runs (a JPEG classification dataset, a forecast dataset with an empty split,
a raw multi-label dataset); every value TFDS gives is compared with what
``reader.records.ShardedRecords`` reads from the same shards, matched by key.
"""

from __future__ import annotations

import json
import os
import shutil

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_datasets as tfds

from reader import contract
from reader.contract import DatasetError
from reader.export_tfds import accurate_jpeg_decoders, export_tfds, main
from reader.records import ShardedRecords
from tests.job_runs import TEST_IMAGE_SIZE, files_under, run_images_job
from tests.reader.helpers import write_jsonl

UNCOMPRESSED = "--compression=none"
CLASS_SIZES = {"red": 24, "green": 16, "blue": 10}
UNSEEN_TAG = "zebra"  # only on validation rows: stored as label -1
# contract.STORED_JPEG_DCT_METHOD: TensorFlow's fast IDCT is up to 18 levels off.
FAST_IDCT_MAX_DIFF = 18


def _noise_png(path: str, seed: int) -> None:
    """Noise, so that the JPEG IDCTs differ (solid colours decode alike)."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    pixels = np.random.default_rng(seed).integers(0, 256, (20, 24, 3), dtype=np.uint8)
    tf.io.write_file(path, tf.io.encode_png(pixels))


@pytest.fixture(scope="module")
def jpeg_dataset(tmp_path_factory) -> tuple[str, list[str]]:
    """(exported JPEG classification dataset, its files before the export)."""
    root = tmp_path_factory.mktemp("export_input")
    seed = 0
    for label, count in CLASS_SIZES.items():
        for i in range(count):
            _noise_png(str(root / label / f"{i:03d}.png"), seed := seed + 1)
    out = str(tmp_path_factory.mktemp("export_jpeg"))
    run_images_job(str(root), out, UNCOMPRESSED, "--num_shards=2")
    before = files_under(out)
    export_tfds(out)
    return out, before


@pytest.fixture(scope="module")
def forecast_dataset(tmp_path_factory) -> str:
    """Two ramps; the test split is empty (fraction 0)."""
    from pipelines import timeseries

    root = tmp_path_factory.mktemp("export_forecast")
    rows = [{"series_id": sid, "timestamp": t, "value": float(t * slope)}
            for sid, slope in (("up", 1), ("down", -2)) for t in range(100)]
    out = str(root / "out")
    timeseries.run([f"--input={write_jsonl(str(root / 'rows.jsonl'), rows)}",
                    f"--output_dir={out}", "--window_size=6", "--horizon=2",
                    "--split_fractions=0.8,0.2,0", "--num_shards=2", UNCOMPRESSED])
    export_tfds(out)
    return out


@pytest.fixture(scope="module")
def multi_label_dataset(tmp_path_factory) -> str:
    """Tag sets stored as raw images, a class only validation has, a carried column."""
    root = tmp_path_factory.mktemp("export_tags")
    rows = []
    for i in range(40):
        _noise_png(str(root / "img" / f"{i:03d}.png"), 100 + i)
        tags = [tag for tag, every in (("even", 2), ("third", 3), ("fifth", 5))
                if i % every == 0]
        unseen = i % 8 == 7
        rows.append({"path": f"img/{i:03d}.png", "tags": tags + [UNSEEN_TAG] * unseen,
                     "caption": f"scan {i} ✓", "split": "validation" if unseen else ""})
    out = str(tmp_path_factory.mktemp("export_tags_out"))
    run_images_job(write_jsonl(str(root / "rows.jsonl"), rows), out, UNCOMPRESSED,
                   "--multi_label", "--label_column=tags", "--carry_columns=caption",
                   "--image_format=raw", "--num_shards=2")
    export_tfds(out)
    return out


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


# --- JPEG classification -----------------------------------------------------------------


def test_export_tfds_writes_only_tfds_metadata_and_reruns(jpeg_dataset):
    out, before = jpeg_dataset
    assert export_tfds(out) == os.path.join(out, "dataset_info.json")
    assert sorted(set(files_under(out)) - set(before)) == [
        "dataset_info.json", "features.json", "label.labels.txt"]
    assert set(before) <= set(files_under(out))


def test_export_tfds_split_lengths_equal_the_manifest(jpeg_dataset):
    out, _ = jpeg_dataset
    splits = tfds.builder_from_directory(out).info.splits
    manifest = _manifest(out)
    assert {name: splits[name].num_examples for name in splits.keys()} == {
        split: entry["num_records"] for split, entry in manifest["splits"].items()}
    assert {name: splits[name].num_shards for name in splits.keys()} == {
        split: len(entry["shards"]) for split, entry in manifest["splits"].items()}
    assert all(len(entry["shards"]) == 2 for entry in manifest["splits"].values())


def test_export_tfds_reads_every_key_exactly_once(jpeg_dataset):
    out, _ = jpeg_dataset
    keys = [key for split in contract.SPLITS for key in _keys(_tfds_rows(out, split))]
    assert len(keys) == len(set(keys)) == sum(CLASS_SIZES.values())
    for split in contract.SPLITS:
        assert sorted(_keys(_tfds_rows(out, split))) == sorted(_ours(out, split))


def test_export_tfds_sub_splits_are_the_records_at_those_indices(jpeg_dataset):
    out, _ = jpeg_dataset
    train = list(_ours(out, "train"))
    assert len(train) % 10 != 5  # No tie in TFDS's rounding of the boundary.
    tenth = _keys(_tfds_rows(out, "train[:10%]"))
    assert sorted(tenth) == sorted(train[:round(len(train) / 10)])
    assert sorted(_keys(_tfds_rows(out, "train[-3:]"))) == sorted(train[-3:])


def test_export_tfds_accurate_jpeg_decoders_give_the_reader_pixels(jpeg_dataset):
    out, _ = jpeg_dataset
    for split in contract.SPLITS:
        ours = _ours(out, split)
        for row in _tfds_rows(out, split, decoders=accurate_jpeg_decoders()):
            assert row["image"].shape == (TEST_IMAGE_SIZE, TEST_IMAGE_SIZE, 3)
            np.testing.assert_array_equal(row["image"], ours[row["key"].decode()]["image"])


def test_export_tfds_default_jpeg_decode_is_a_few_levels_off(jpeg_dataset):
    out, _ = jpeg_dataset
    ours = _ours(out, "train")
    diffs = [int(np.abs(row["image"].astype(int) - ours[row["key"].decode()]["image"]).max())
             for row in _tfds_rows(out, "train")]
    assert 0 < max(diffs) <= FAST_IDCT_MAX_DIFF


def test_export_tfds_class_labels_are_the_label_vocab(jpeg_dataset):
    out, _ = jpeg_dataset
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


def test_export_tfds_as_supervised_gives_image_and_label(jpeg_dataset):
    out, _ = jpeg_dataset
    pairs = _tfds_rows(out, "test", as_supervised=True)
    labels = [row["label"] for row in _tfds_rows(out, "test")]
    assert [label for _, label in pairs] == labels
    assert all(image.shape == (TEST_IMAGE_SIZE, TEST_IMAGE_SIZE, 3) for image, _ in pairs)


def test_main_prints_how_to_load_and_exits_0(jpeg_dataset, capsys):
    out, _ = jpeg_dataset
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


def test_export_tfds_appended_version_is_a_split_of_its_own(jpeg_dataset, tmp_path,
                                                            capsys):
    out = str(tmp_path / "appended")
    shutil.copytree(jpeg_dataset[0], out)
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


def test_export_tfds_refuses_a_shard_named_by_hand(jpeg_dataset, tmp_path):
    out = str(tmp_path / "renamed")
    shutil.copytree(jpeg_dataset[0], out)
    manifest = _manifest(out)
    shard = manifest["splits"]["test"]["shards"][0]
    os.rename(os.path.join(out, shard["path"]), os.path.join(out, "test/mine.tfrecord"))
    shard["path"] = "test/mine.tfrecord"
    with open(os.path.join(out, contract.MANIFEST_FILENAME), "w") as f:
        f.write(contract.dumps_manifest(manifest))
    with pytest.raises(DatasetError, match=r"'test/mine.tfrecord' of split 'test' is not"):
        export_tfds(out)


# --- Time series -------------------------------------------------------------------------


def test_export_tfds_forecast_blocks_equal_the_reader_records(forecast_dataset):
    manifest = _manifest(forecast_dataset)
    for split in ("train", "validation"):
        ours = _ours(forecast_dataset, split)
        rows = _tfds_rows(forecast_dataset, split)
        assert len(rows) == manifest["splits"][split]["num_records"] == len(ours) > 0
        for row in rows:
            item = ours[row["key"].decode()]
            assert row["window"].shape == tuple(manifest["features"]["window"]["shape"])
            assert row["target"].shape == tuple(manifest["features"]["target"]["shape"])
            np.testing.assert_array_equal(row["window"], item["window"])
            np.testing.assert_array_equal(row["target"], item["target"])
            assert row["series_id"].decode() == item["series_id"]


def test_export_tfds_leaves_out_an_empty_split(forecast_dataset, capsys):
    assert _manifest(forecast_dataset)["splits"]["test"]["num_records"] == 0
    assert list(tfds.builder_from_directory(forecast_dataset).info.splits.keys()) == [
        "train", "validation"]
    assert main([forecast_dataset]) == 0
    assert "empty splits left out (TFDS cannot read one): test" in capsys.readouterr().out


# --- Multi-label, raw images -------------------------------------------------------------


def test_export_tfds_multi_label_sets_keep_their_ids_and_minus_one(multi_label_dataset):
    vocab = _manifest(multi_label_dataset)["label_vocab"]
    label = tfds.builder_from_directory(multi_label_dataset).info.features["label"]
    assert label.feature.names == vocab
    seen_unseen = False
    for split in contract.SPLITS:
        ours = _ours(multi_label_dataset, split)
        for row in _tfds_rows(multi_label_dataset, split):
            item = ours[row["key"].decode()]
            names = [name.decode() for name in row["label_name"]]
            assert names == item["label_name"]
            assert [vocab[i] if i >= 0 else UNSEEN_TAG for i in row["label"]] == names
            assert sorted(i for i in row["label"] if i >= 0) == np.flatnonzero(
                item["label"]).tolist()
            seen_unseen |= -1 in row["label"].tolist()
    assert seen_unseen


def test_export_tfds_raw_images_and_carried_text_are_exact(multi_label_dataset):
    for split in contract.SPLITS:
        ours = _ours(multi_label_dataset, split)
        for row in _tfds_rows(multi_label_dataset, split):
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
