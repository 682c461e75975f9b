"""End-to-end tests of the image job's label columns: multi-label sets, numeric
targets and carried columns, on real image content (scikit-learn's digit scans).

Each digit is tagged ``even``/``odd`` and ``small`` (0-4) / ``large`` (5-9), has the
numeric targets ``value`` (the digit) and ``ink`` (its summed ink level), and carries
an ``id`` and a ``caption``. Expected values are derived here from those rows with
plain Python sets and NumPy, never from the job's code. Three job runs: the JSONL
manifest on one worker (module fixture), the same rows as CSV on two worker threads
(the same shards: CSV parsing and worker count change nothing), and a
regression-only run that trains a Keras model.
"""

from __future__ import annotations

import json
import math
import os

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_transform as tft

from reader import make_dataset
from reader.format import contract
from tests.job_runs import (
    TEST_IMAGE_SIZE,
    all_records,
    rejected_records,
    run_images_job,
    shard_digests,
)

NUM_DIGITS = 480
# Every 40th digit goes to validation with the extra tag "unseen", a class no train
# image has: it has no vocabulary id and is stored as -1.
UNSEEN = "unseen"
LABEL_FLAGS = ("--multi_label", "--label_column=tags", "--target_columns=value,ink",
               "--carry_columns=id,caption")
# JSONL rows no example may come from, each with the reason it must be filed under.
BAD_JSONL_ROWS = [
    ({"tags": ["even"], "value": None, "ink": 1.0}, "missing_target"),
    ({"tags": ["even"], "ink": 1.0}, "missing_target"),
    ({"tags": ["even"], "value": "abc", "ink": 1.0}, "invalid_target"),
    ({"tags": ["even"], "value": True, "ink": 1.0}, "invalid_target"),
    ({"tags": ["even"], "value": math.nan, "ink": 1.0}, "non_finite_target"),
    ({"tags": ["even"], "value": 1e39, "ink": 1.0}, "non_finite_target"),
    ({"tags": ["even", 3], "value": 1.0, "ink": 1.0}, "invalid_label"),
    ({"tags": "even", "value": 1.0, "ink": 1.0}, "invalid_label"),
]
BAD_CSV_FIELDS = [("even", "abc", "1", "invalid_target"),
                  ("even", "nan", "1", "non_finite_target"),
                  ("even", "1e39", "1", "non_finite_target"),
                  ("even", "", "1", "missing_target")]


def _tags(digit: int) -> list[str]:
    return ["even" if digit % 2 == 0 else "odd", "small" if digit < 5 else "large"]


@pytest.fixture(scope="module")
def digit_rows(tmp_path_factory) -> tuple[str, list[dict]]:
    """The digits as PNG files and their good manifest rows."""
    from PIL import Image
    from sklearn.datasets import load_digits

    root = tmp_path_factory.mktemp("digits")
    digits = load_digits()
    rows = []
    for i in range(NUM_DIGITS):
        gray = (255 - np.round(digits.images[i] * 255.0 / 16.0)).astype(np.uint8)
        path = f"img/{i:04d}.png"
        os.makedirs(root / "img", exist_ok=True)
        Image.fromarray(gray, "L").save(root / path)
        digit = int(digits.target[i])
        unseen = i % 40 == 0
        rows.append({"path": path, "tags": _tags(digit) + [UNSEEN] * unseen,
                     "value": float(digit), "ink": float(digits.images[i].sum()) / 7.0,
                     "id": f"scan-{i}", "caption": f"a {digit}, scan {i}, \"quoted\"",
                     "split": "validation" if unseen else ""})
    return str(root), rows


def _write_jsonl(root: str, rows: list[dict], bad: list[tuple[dict, str]],
                 name: str = "digits.jsonl") -> str:
    path = os.path.join(root, name)
    with open(path, "w") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")
        for i, (row, _) in enumerate(bad):
            f.write(json.dumps({"path": f"img/{i:04d}.png".replace("img", "bad"),
                                "id": "x", "caption": "", **row}) + "\n")
    return path


@pytest.fixture(scope="module")
def labelled(digit_rows, tmp_path_factory) -> tuple[str, dict, list[dict]]:
    """The JSONL job run: (output dir, manifest, good rows)."""
    root, rows = digit_rows
    manifest_path = _write_jsonl(root, rows, BAD_JSONL_ROWS)
    out = str(tmp_path_factory.mktemp("labelled"))
    return out, run_images_job(manifest_path, out, *LABEL_FLAGS), rows


def _train_rows(out: str, manifest: dict, rows: list[dict]) -> list[dict]:
    train_keys = {key for key, (split, _) in all_records(out, manifest).items()
                  if split == contract.TRAIN}
    return [row for row in rows if row["path"] in train_keys]


# --- What is stored --------------------------------------------------------------------

def _by_frequency(counts: dict[str, int]) -> list[str]:
    """Decreasing train frequency, ties in reverse byte order."""
    return sorted(counts, key=lambda t: (-counts[t], [-b for b in t.encode()]))


def test_vocabulary_is_fit_on_train_sets_in_sorted_name_order(labelled):
    out, manifest, rows = labelled
    counts: dict[str, int] = {}
    for row in _train_rows(out, manifest, rows):
        for tag in set(row["tags"]):
            counts[tag] = counts.get(tag, 0) + 1
    assert sorted(counts) != _by_frequency(counts)  # the test tells the orders apart
    assert manifest["task"] == "multi_label"
    assert manifest["label_vocab"] == sorted(counts)
    assert manifest["preprocessing"]["labels"]["class_order"] == "name"
    assert manifest["label_counts"]["train"] == dict(sorted(counts.items()))


def _garden_tags(i: int) -> list[str]:
    return (["sky"] + ["pagoda"] * (i % 2 == 0) + ["leaves"] * (i % 3 == 0)
            + ["Petals"] * (i % 5 == 0))


def test_class_order_frequency_numbers_label_sets_by_train_frequency(digit_rows, tmp_path):
    root, rows = digit_rows
    garden = [{"path": row["path"], "tags": _garden_tags(i), "split": "train"}
              for i, row in enumerate(rows[:30])]
    manifest_path = _write_jsonl(root, garden, [], name="garden.jsonl")
    out = str(tmp_path / "out")
    manifest = run_images_job(manifest_path, out, "--multi_label", "--label_column=tags",
                              "--class_order=frequency")
    expected = ["sky", "pagoda", "leaves", "Petals"]  # 30, 15, 10 and 6 of 30 rows
    assert sorted(expected) == ["Petals", "leaves", "pagoda", "sky"]
    assert manifest["label_vocab"] == expected
    assert manifest["preprocessing"]["labels"]["class_order"] == "frequency"
    stored = all_records(out, manifest)
    for row in garden:
        features = stored[row["path"]][1]
        ids = sorted((expected.index(tag), tag) for tag in row["tags"])
        assert list(features["label"]) == [i for i, _ in ids]
        assert [n.decode() for n in features["label_name"]] == [tag for _, tag in ids]


def test_stored_label_sets_are_sorted_ids_with_their_names(labelled):
    out, manifest, rows = labelled
    vocab = manifest["label_vocab"]
    stored = all_records(out, manifest)
    for row in rows:
        features = stored[row["path"]][1]
        ids = sorted((vocab.index(tag) if tag in vocab else -1, tag) for tag in row["tags"])
        assert list(features["label"]) == [i for i, _ in ids]
        assert [n.decode() for n in features["label_name"]] == [tag for _, tag in ids]


def test_a_class_unseen_in_train_is_stored_as_minus_one_and_counted(labelled):
    out, manifest, rows = labelled
    unseen = [row["path"] for row in rows if UNSEEN in row["tags"]]
    stored = all_records(out, manifest)
    assert UNSEEN not in manifest["label_vocab"]
    assert all(stored[key][0] == "validation" and stored[key][1]["label"][0] == -1
               for key in unseen)
    assert manifest["label_counts"]["validation"][UNSEEN] == len(unseen)


def test_make_dataset_gives_multi_hot_sets_and_targets(labelled):
    out, manifest, rows = labelled
    vocab = manifest["label_vocab"]
    by_key = {row["path"]: row for row in rows}
    mean, std = (np.array(manifest["targets"][s], np.float32) for s in ("mean", "std"))
    seen = 0
    for split in contract.SPLITS:
        for features, label in make_dataset(out, split, 64, features=["key"]):
            for key, hot, target in zip(features["key"].numpy(), label["label"].numpy(),
                                        label["target"].numpy(), strict=True):
                row = by_key[key.decode()]
                # The unseen tag has no column.
                assert hot.tolist() == [float(t in row["tags"]) for t in vocab]
                raw = np.array([row["value"], row["ink"]], np.float32)
                np.testing.assert_array_equal(target, (raw - mean) / std)
                seen += 1
    assert seen == len(rows)


def test_manifest_target_statistics_equal_an_independent_float64_computation(labelled):
    out, manifest, rows = labelled
    train = np.array([[r["value"], r["ink"]] for r in _train_rows(out, manifest, rows)],
                     np.float32).astype(np.float64)
    assert manifest["targets"]["columns"] == ["value", "ink"]
    assert manifest["targets"]["mean"] == [float(np.float32(m)) for m in train.mean(axis=0)]
    assert manifest["targets"]["std"] == [float(np.float32(s)) for s in train.std(axis=0)]


def test_carried_columns_are_stored_unchanged(labelled):
    out, manifest, rows = labelled
    by_key = {row["path"]: row for row in rows}
    assert manifest["carried_columns"] == ["id", "caption"]
    for features, _ in make_dataset(out, "train", 64, features=["key", "id", "caption"]):
        for key, ident, caption in zip(*(features[n].numpy() for n in ("key", "id", "caption")),
                                       strict=True):
            row = by_key[key.decode()]
            assert (ident.decode(), caption.decode()) == (row["id"], row["caption"])


# --- Bad values ----------------------------------------------------------------------

def test_bad_values_are_dead_letters_with_their_reasons(labelled):
    out, _, _ = labelled
    reasons = sorted(r["reason"] for r in rejected_records(out))
    assert reasons == sorted(reason for _, reason in BAD_JSONL_ROWS)


def test_counts_reconcile(labelled):
    _, manifest, rows = labelled
    written = sum(manifest["splits"][s]["num_records"] for s in contract.SPLITS)
    assert (manifest["inputs"], written, manifest["rejected"]["count"]) == (
        len(rows) + len(BAD_JSONL_ROWS), len(rows), len(BAD_JSONL_ROWS))


# --- The same rows as CSV, on two workers ----------------------------------------------

def test_csv_manifest_on_two_workers_stores_the_same_shards(digit_rows, labelled,
                                                            tmp_path):
    root, rows = digit_rows
    path = os.path.join(root, "digits.csv")
    with open(path, "w") as f:
        f.write("path,tags,value,ink,id,caption,split\n")
        for row in rows:
            caption = row["caption"].replace('"', '""')
            f.write(f'{row["path"]},{"|".join(row["tags"])},{row["value"]!r},'
                    f'{row["ink"]!r},{row["id"]},"{caption}",{row["split"]}\n')
        for i, (tags, value, ink, _) in enumerate(BAD_CSV_FIELDS):
            f.write(f"bad/{i}.png,{tags},{value},{ink},x,,\n")
    run_images_job(path, str(tmp_path / "csv"), *LABEL_FLAGS, "--direct_num_workers=2",
                   "--direct_running_mode=multi_threading")
    assert shard_digests(str(tmp_path / "csv")) == shard_digests(labelled[0])
    assert sorted(r["reason"] for r in rejected_records(str(tmp_path / "csv"))) == sorted(
        reason for *_, reason in BAD_CSV_FIELDS)


# --- Serving --------------------------------------------------------------------------

def test_raw_feature_spec_lists_the_new_columns(labelled):
    spec = tft.TFTransformOutput(labelled[0]).raw_feature_spec()
    assert spec == {
        "image": tf.io.FixedLenFeature([], tf.string),
        "key": tf.io.FixedLenFeature([], tf.string),
        "label": tf.io.VarLenFeature(tf.string),
        "target": tf.io.FixedLenFeature([2], tf.float32),
        "id": tf.io.FixedLenFeature([], tf.string),
        "caption": tf.io.FixedLenFeature([], tf.string),
    }


def test_serving_parse_then_transform_reproduces_the_stored_features(digit_rows, labelled):
    root, _ = digit_rows
    out, manifest, rows = labelled
    sample = rows[:24]
    serialized = []
    for row in sample:
        with open(os.path.join(root, row["path"]), "rb") as f:
            image = f.read()
        feature = {
            "image": [image], "key": [row["path"].encode()], "id": [row["id"].encode()],
            "caption": [row["caption"].encode()],
            "label": [t.encode() for t in row["tags"]]}
        example = tf.train.Example(features=tf.train.Features(feature={
            **{k: tf.train.Feature(bytes_list=tf.train.BytesList(value=v))
               for k, v in feature.items()},
            "target": tf.train.Feature(float_list=tf.train.FloatList(
                value=[row["value"], row["ink"]]))}))
        serialized.append(example.SerializeToString())
    output = tft.TFTransformOutput(out)
    served = output.transform_raw_features(
        tf.io.parse_example(tf.constant(serialized), output.raw_feature_spec()))
    stored = all_records(out, manifest)
    ids = tf.RaggedTensor.from_sparse(served["label"]).to_list()
    for i, row in enumerate(sample):
        features = stored[row["path"]][1]
        assert served["image"][i].numpy() == features["image"]
        assert ids[i] == list(features["label"])
        np.testing.assert_array_equal(served["target"][i].numpy(), features["target"])
        assert served["caption"][i].numpy() == features["caption"]


# --- Training -------------------------------------------------------------------------

def _mlp(outputs: int, activation: str | None) -> tf.keras.Model:
    size = TEST_IMAGE_SIZE
    return tf.keras.Sequential([
        tf.keras.layers.Input([size, size, 3]),
        tf.keras.layers.Flatten(),
        tf.keras.layers.Dense(64, activation="relu"),
        tf.keras.layers.Dense(outputs, activation=activation),
    ])


def test_keras_learns_the_multi_label_sets(labelled):
    out, manifest, _ = labelled
    tf.keras.utils.set_random_seed(3)
    num_classes = len(manifest["label_vocab"])
    model = _mlp(num_classes, "sigmoid")
    model.compile("adam", "binary_crossentropy",
                  metrics=[tf.keras.metrics.BinaryAccuracy(name="accuracy")])

    def sets_only(dataset):
        return dataset.map(lambda image, label: (image, label["label"]))

    model.fit(sets_only(make_dataset(out, "train", 32, seed=1, cache="memory")), epochs=15,
              verbose=0)
    held_out = sets_only(make_dataset(out, "validation", 64)).concatenate(
        sets_only(make_dataset(out, "test", 64)))
    _, accuracy = model.evaluate(held_out, verbose=0)
    # Chance is 0.5 per tag (each pair of tags splits the digits about evenly).
    assert accuracy > 0.75, accuracy


def test_keras_learns_a_numeric_target_better_than_the_mean(digit_rows, tmp_path):
    root, rows = digit_rows
    path = _write_jsonl(root, rows, [], name="good.jsonl")
    out = str(tmp_path / "regression")
    manifest = run_images_job(path, out, "--label_column=none", "--target_columns=value",
                              "--normalize_targets=none")
    assert manifest["task"] == "regression" and "label" not in manifest["features"]
    # --normalize_targets=none: the stored target is the given value, as float32.
    stored = all_records(out, manifest)
    assert {key: features["target"].tolist() for key, (_, features) in stored.items()} == {
        row["path"]: [float(np.float32(row["value"]))] for row in rows}
    tf.keras.utils.set_random_seed(3)
    model = _mlp(1, None)
    model.compile(tf.keras.optimizers.Adam(3e-3), "mse")
    model.fit(make_dataset(out, "train", 32, seed=1, cache="memory"), epochs=40, verbose=0)
    train = np.concatenate([t.numpy() for _, t in make_dataset(out, "train", 256)])
    held_out = make_dataset(out, "validation", 64).concatenate(make_dataset(out, "test", 64))
    targets = np.concatenate([t.numpy() for _, t in held_out])
    mse_of_mean = float(np.mean((targets - train.mean()) ** 2))
    mse = model.evaluate(held_out, verbose=0)
    assert mse < 0.5 * mse_of_mean, (mse, mse_of_mean)
