"""make_dataset's labels beyond one class: multi-hot sets, numeric targets, both, and
carried columns, on datasets written from plain Python rows (label_fixtures.py)."""

from __future__ import annotations

import json
import math
import os
import shutil

import numpy as np
import pytest
import tensorflow as tf

import reader
from reader import verify
from tests.reader.label_fixtures import (
    CARRIED_COLUMNS,
    TAGS,
    TARGET_COLUMNS,
    UNSEEN_TAG,
    make_rows,
    multi_hot,
    stored_targets,
)

ROWS = {row["key"]: row for row in make_rows()}


def manifest_of(data_dir: str) -> dict:
    with open(os.path.join(data_dir, "manifest.json")) as f:
        return json.load(f)


def keys_in(split: str) -> list[str]:
    return sorted(key for key, row in ROWS.items() if row["split"] == split)


def labels_by_key(dataset: tf.data.Dataset) -> dict[str, list]:
    """{key: [label of each time the key was read]} from a ``features=["key"]`` stream;
    a dict label becomes a dict of lists."""
    seen: dict[str, list] = {}
    for features, label in dataset.as_numpy_iterator():
        for i, key in enumerate(features["key"]):
            value = ({name: part[i].tolist() for name, part in label.items()}
                     if isinstance(label, dict) else label[i].tolist())
            seen.setdefault(key.decode(), []).append(value)
    return seen


@pytest.mark.parametrize("split", ["train", "validation"])
def test_make_dataset_multi_label_yields_the_multi_hot_of_each_set(multi_label_dataset,
                                                                  split):
    vocab = manifest_of(multi_label_dataset)["label_vocab"]
    assert sorted(vocab) == sorted(TAGS)
    dataset = reader.make_dataset(multi_label_dataset, split, 16, seed=1, features=["key"])
    assert dataset.element_spec[1] == tf.TensorSpec([None, len(TAGS)], tf.float32)
    seen = labels_by_key(dataset)
    assert sorted(seen) == keys_in(split)
    for key, labels in seen.items():
        assert labels == [multi_hot(ROWS[key]["tags"], vocab)], key


def test_make_dataset_multi_label_ignores_classes_not_in_train(multi_label_dataset):
    dataset = reader.make_dataset(multi_label_dataset, "validation", 8,
                                  features=["key", "label", "label_name"])
    unseen = 0
    for features, label in dataset:
        ids, names = features["label"].to_list(), features["label_name"].to_list()
        for key, row_ids, row_names, hot in zip(features["key"].numpy(), ids, names,
                                                label.numpy(), strict=True):
            tags = ROWS[key.decode()]["tags"]
            # Stored as written: ids ascending (-1 first), names in the same order.
            assert sorted(n.decode() for n in row_names) == sorted(tags)
            assert row_ids == sorted(row_ids)
            assert (-1 in row_ids) == (UNSEEN_TAG in tags)
            unseen += UNSEEN_TAG in tags
            assert hot.sum() == len(set(tags) - {UNSEEN_TAG})
    assert unseen > 0


@pytest.mark.parametrize("store", ["memory", "cache_file", "snapshot", "augmented"])
def test_make_dataset_multi_label_cache_and_snapshot_keep_each_set(multi_label_dataset,
                                                                  tmp_path, store):
    vocab = manifest_of(multi_label_dataset)["label_vocab"]
    kwargs = {"memory": {"cache": "memory"},
              "cache_file": {"cache": str(tmp_path / "cache")},
              "snapshot": {"snapshot": str(tmp_path / "snapshot")},
              "augmented": {"cache": "memory", "augment": True}}[store]
    dataset = reader.make_dataset(multi_label_dataset, "validation", 7, shuffle=True,
                                  seed=2, num_epochs=2, features=["key"], **kwargs)
    seen = labels_by_key(dataset)
    assert sorted(seen) == keys_in("validation")
    for key, labels in seen.items():
        assert labels == [multi_hot(ROWS[key]["tags"], vocab)] * 2, key


def test_make_dataset_regression_yields_the_stored_targets(regression_dataset):
    targets = manifest_of(regression_dataset)["targets"]
    dataset = reader.make_dataset(regression_dataset, "train", 16, seed=0,
                                  features=["key"])
    assert dataset.element_spec[1] == tf.TensorSpec([None, 2], tf.float32)
    seen = labels_by_key(dataset)
    assert sorted(seen) == keys_in("train")
    info = reader.open_dataset(regression_dataset)
    for key, labels in seen.items():
        assert labels == [stored_targets(ROWS[key], targets)], key
        # De-normalised: the input's values again, to float32 precision.
        np.testing.assert_allclose(info.denormalize_targets(labels[0]),
                                   ROWS[key]["targets"], rtol=1e-6)


def test_make_dataset_class_and_targets_yield_a_dict_label(class_targets_dataset):
    vocab = manifest_of(class_targets_dataset)["label_vocab"]
    dataset = reader.make_dataset(class_targets_dataset, "test", 16, features=["key"])
    assert dataset.element_spec[1] == {
        "label": tf.TensorSpec([None], tf.int64),
        "target": tf.TensorSpec([None, 1], tf.float32)}
    seen = labels_by_key(dataset)
    assert sorted(seen) == keys_in("test")
    for key, labels in seen.items():
        row = ROWS[key]
        # normalize="none": the age as given, in float32.
        assert labels == [{"label": vocab.index(row["colour"]),
                           "target": [float(np.float32(row["targets"][0]))]}], key


def test_make_dataset_multi_label_and_targets_pair_each_image_with_its_labels(
        multi_label_targets_dataset):
    manifest = manifest_of(multi_label_targets_dataset)
    rows = {row["index"]: row for row in ROWS.values()}
    count = 0
    # Default input (the image): the pixels tell the row.
    for images, label in reader.make_dataset(multi_label_targets_dataset, "train", 16,
                                             seed=4):
        assert images.dtype == tf.float32 and sorted(label) == ["label", "target"]
        for image, hot, target in zip(images.numpy(), label["label"].numpy(),
                                      label["target"].numpy(), strict=True):
            red, green = np.round(image[0, 0, :2] * 255).astype(int)
            row = rows[int(red) + 256 * int(green)]
            assert hot.tolist() == multi_hot(row["tags"], manifest["label_vocab"])
            assert target.tolist() == stored_targets(row, manifest["targets"])
            count += 1
    assert count == len(keys_in("train"))


def test_make_dataset_carried_columns_come_through_features(multi_label_dataset):
    dataset = reader.make_dataset(multi_label_dataset, "test", 9,
                                  features=["key", *CARRIED_COLUMNS])
    count = 0
    for features, _ in dataset.as_numpy_iterator():
        for i, key in enumerate(features["key"]):
            row = ROWS[key.decode()]
            for column in CARRIED_COLUMNS:
                assert features[column][i].decode() == row[column]
            count += 1
    assert count == len(keys_in("test"))


@pytest.mark.parametrize("cache", [None, "memory"])
@pytest.mark.parametrize(("fixture", "label_spec"), [
    ("multi_label_dataset", tf.TensorSpec([5, len(TAGS)], tf.float32)),
    ("regression_dataset", tf.TensorSpec([5, 2], tf.float32)),
    ("class_targets_dataset", {"label": tf.TensorSpec([5], tf.int64),
                               "target": tf.TensorSpec([5, 1], tf.float32)}),
    ("multi_label_targets_dataset", {"label": tf.TensorSpec([5, len(TAGS)], tf.float32),
                                     "target": tf.TensorSpec([5, 2], tf.float32)}),
])
def test_make_dataset_drop_remainder_gives_static_label_shapes(request, fixture,
                                                               label_spec, cache):
    data_dir = request.getfixturevalue(fixture)
    dataset = reader.make_dataset(data_dir, "validation", 5, drop_remainder=True,
                                  cache=cache)
    assert dataset.element_spec[1] == label_spec
    _, label = next(iter(dataset))
    assert tf.nest.map_structure(lambda t: t.shape, label) == tf.nest.map_structure(
        lambda s: s.shape, label_spec)


def test_make_dataset_drop_remainder_gives_ragged_features_a_static_batch(
        multi_label_dataset):
    dataset = reader.make_dataset(multi_label_dataset, "train", 4, drop_remainder=True,
                                  features=["label", "label_name"])
    assert dataset.element_spec[0]["label"].shape.as_list() == [4, None]
    assert dataset.element_spec[0]["label_name"].dtype == tf.string


@pytest.mark.parametrize(("fixture", "reason"), [
    ("multi_label_dataset", "an image counts toward every class in its set"),
    ("regression_dataset", "regression dataset"),
])
def test_make_dataset_balance_refuses_datasets_without_one_class(request, fixture,
                                                                  reason):
    with pytest.raises(ValueError, match=reason):
        reader.make_dataset(request.getfixturevalue(fixture), "train", 8, balance=True)


def test_make_dataset_balance_still_balances_classes_with_targets(class_targets_dataset):
    dataset = reader.make_dataset(class_targets_dataset, "train", 16, seed=0,
                                  balance=True, num_epochs=20)
    counts = np.bincount(np.concatenate([label["label"] for _, label in
                                         dataset.as_numpy_iterator()]), minlength=3)
    rarest = min(manifest_of(class_targets_dataset)["label_counts"]["train"].values())
    # ~20 * rarest per class; binomial spread well inside 15 %.
    assert np.all(np.abs(counts - 20 * rarest) < 0.15 * 20 * rarest), counts


def test_dataset_info_describes_classes_targets_and_carried_columns(
        multi_label_targets_dataset, multi_label_dataset, regression_dataset):
    info = reader.open_dataset(multi_label_targets_dataset)
    assert (info.task, info.multi_label, info.has_classes) == ("multi_label", True, True)
    assert info.num_classes == len(TAGS) and info.target_columns == TARGET_COLUMNS
    assert info.carried_columns == []
    assert reader.open_dataset(multi_label_dataset).carried_columns == CARRIED_COLUMNS
    # An image counts toward each class of its set.
    tags_held = sum(len(ROWS[key]["tags"]) for key in keys_in("train"))
    assert sum(info.label_counts("train").values()) == tags_held > info.num_records("train")
    regression = reader.open_dataset(regression_dataset)
    assert (regression.num_classes, regression.has_classes) == (0, False)


@pytest.mark.parametrize(("change", "message"), [
    ({"task": "ranking"}, "task 'ranking', which this reader version does not know"),
    ({"targets": None}, "regression dataset without a 'targets' entry"),
])
def test_open_dataset_refuses_labels_it_cannot_read(regression_dataset, tmp_path,
                                                    change, message):
    copy = str(tmp_path / "copy")
    shutil.copytree(regression_dataset, copy)
    manifest = manifest_of(copy)
    manifest.update(change)
    manifest = {name: value for name, value in manifest.items() if value is not None}
    with open(os.path.join(copy, "manifest.json"), "w") as f:
        json.dump(manifest, f)
    with pytest.raises(reader.DatasetError, match=message):
        reader.open_dataset(copy)


def test_steps_per_epoch_and_verify_work_on_multi_label_datasets(multi_label_dataset):
    steps = reader.steps_per_epoch(multi_label_dataset, "train", 16)
    assert steps == math.ceil(len(keys_in("train")) / 16)
    assert len(list(reader.make_dataset(multi_label_dataset, "train", 16))) == steps
    assert verify.find_damaged_shards(multi_label_dataset) == []


@pytest.mark.parametrize("cache", [None, "memory"])
def test_make_dataset_multi_label_iterator_resumes_mid_epoch(
        multi_label_targets_dataset, tmp_path, fresh_global_seed, cache):
    def stream() -> tf.data.Dataset:
        return reader.make_dataset(multi_label_targets_dataset, "train", 8, seed=3,
                                   cache=cache, features=["key"])

    def rest(iterator) -> list:
        return [(features["key"].numpy().tolist(), label["label"].numpy().tolist(),
                 label["target"].numpy().tolist()) for features, label in iterator]

    iterator = iter(stream())
    for _ in range(3):
        next(iterator)
    path = tf.train.Checkpoint(iterator=iterator).write(str(tmp_path / "ckpt"))
    expected = rest(iterator)
    restored = iter(stream())
    tf.train.Checkpoint(iterator=restored).read(path).assert_consumed()
    assert rest(restored) == expected
    assert len(expected) == math.ceil(len(keys_in("train")) / 8) - 3
