"""make_dataset's cardinality: the batches it yields, known from the manifest's counts
wherever they are exact, so that ``len(dataset)`` works and Keras knows its steps."""

from __future__ import annotations

import warnings

import pytest
import tensorflow as tf

import reader
from tests.job_runs import TEST_IMAGE_SIZE


def batches_yielded(dataset: tf.data.Dataset) -> int:
    """Counted by reading the dataset to its end, independently of its cardinality."""
    return sum(1 for _ in dataset)


def context(workers: int, worker: int) -> reader.ReadConfig:
    return reader.ReadConfig(input_context=tf.distribute.InputContext(
        num_input_pipelines=workers, input_pipeline_id=worker))


# class_targets_dataset: 160 train records in shards of 54, 53 and 53; 40 validation.
CASES = {
    "defaults": dict(batch_size=32),
    "remainder": dict(batch_size=7),
    "drop_remainder": dict(batch_size=7, drop_remainder=True),
    "three_epochs": dict(batch_size=7, num_epochs=3, seed=1),
    "three_epochs_drop_remainder": dict(batch_size=7, num_epochs=3, drop_remainder=True),
    "cache": dict(batch_size=9, cache="memory", seed=2),
    "augment_and_features": dict(batch_size=9, augment=True, features=["key", "image"]),
    "files_of_worker_0_of_2": dict(batch_size=10, read_config=context(2, 0)),
    "files_of_worker_1_of_2": dict(batch_size=10, read_config=context(2, 1)),
    "records_of_worker_3_of_4": dict(batch_size=7, read_config=context(4, 3)),
    "records_of_worker_1_of_7_two_epochs": dict(batch_size=4, num_epochs=2,
                                                read_config=context(7, 1)),
}


@pytest.mark.parametrize("options", CASES.values(), ids=CASES.keys())
def test_make_dataset_cardinality_is_the_batches_it_yields(class_targets_dataset,
                                                           options):
    dataset = reader.make_dataset(class_targets_dataset, "train", **options)
    yielded = batches_yielded(dataset)
    assert yielded > 0
    assert int(dataset.cardinality()) == len(dataset) == yielded


def test_make_dataset_cardinality_of_a_snapshot_and_an_eval_split(class_targets_dataset,
                                                                  tmp_path):
    dataset = reader.make_dataset(class_targets_dataset, "validation", 6,
                                  snapshot=str(tmp_path / "snapshot"))
    assert len(dataset) == batches_yielded(dataset) == 7  # ceil(40 / 6)


def test_make_dataset_cardinality_shares_split_files_by_their_counts(
        class_targets_dataset):
    # Worker 0 of 2 reads shards 0 and 2: 54 + 53 records, not half of 160.
    info = reader.open_dataset(class_targets_dataset)
    assert info.shard_num_records("train") == [54, 53, 53]
    dataset = reader.make_dataset(class_targets_dataset, "train", 1,
                                  read_config=context(2, 0))
    assert len(dataset) == 107


def test_make_dataset_cardinality_is_infinite_when_repeating_forever(
        class_targets_dataset):
    dataset = reader.make_dataset(class_targets_dataset, "train", 8, num_epochs=None)
    assert int(dataset.cardinality()) == tf.data.INFINITE_CARDINALITY


@pytest.mark.parametrize("options", [
    dict(balance=True), dict(read_config=reader.ReadConfig(skip_corrupt=True))],
    ids=["balance", "skip_corrupt"])
def test_make_dataset_cardinality_is_unknown_where_no_count_is_exact(
        class_targets_dataset, options):
    dataset = reader.make_dataset(class_targets_dataset, "train", 8, **options)
    assert int(dataset.cardinality()) == tf.data.UNKNOWN_CARDINALITY


def test_make_dataset_feeds_the_readme_keras_example_without_running_out(image_dataset):
    # README.md's first lines of training code, on the test image dataset.
    train = reader.make_dataset(image_dataset, "train", batch_size=16, seed=7,
                                augment=True, cache="memory")
    val = reader.make_dataset(image_dataset, "validation", batch_size=16)
    model = tf.keras.Sequential([
        tf.keras.Input((TEST_IMAGE_SIZE, TEST_IMAGE_SIZE, 3)),
        tf.keras.layers.Conv2D(4, 3, strides=2, activation="relu"),
        tf.keras.layers.GlobalAveragePooling2D(),
        tf.keras.layers.Dense(len(reader.label_vocabulary(image_dataset))),
    ])
    model.compile("adam", tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        history = model.fit(train, validation_data=val, epochs=2, verbose=0)
    messages = [str(w.message) for w in caught]
    assert not [m for m in messages if "ran out of data" in m], messages
    assert len(history.history["loss"]) == len(history.history["val_loss"]) == 2
