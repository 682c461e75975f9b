"""make_dataset on a dataset written by the real image job (tests/reader/conftest.py)."""

from __future__ import annotations

import collections
import os

import numpy as np
import pytest
import tensorflow as tf

import reader
from reader.format import contract
from reader.tfdata import pipeline
from tests.job_runs import TEST_IMAGE_SIZE
from tests.reader.helpers import BASE_COLOURS, CLASS_SIZES, NUM_SHARDS, manifest_keys


def keys_of(dataset: tf.data.Dataset) -> list[str]:
    return [k.decode() for features, _ in dataset.as_numpy_iterator()
            for k in features["key"]]


def test_make_dataset_yields_batches_for_fit(image_dataset):
    info = reader.open_dataset(image_dataset)
    dataset = reader.make_dataset(image_dataset, "train", batch_size=8, seed=0)
    images, labels = next(iter(dataset))
    assert images.shape == (8, TEST_IMAGE_SIZE, TEST_IMAGE_SIZE, 3)
    assert images.dtype == tf.float32 and labels.dtype == tf.int64
    assert 0.0 <= float(tf.reduce_min(images)) and float(tf.reduce_max(images)) <= 1.0
    # Pixels decode to the class's colour: the label matches the image.
    for image, label in zip(images.numpy(), labels.numpy(), strict=True):
        name = info.label_vocab[label]
        assert np.abs(image[0, 0] * 255 - np.array(BASE_COLOURS[name])).max() <= 26


def test_make_dataset_reads_every_record_once_per_epoch(image_dataset):
    dataset = reader.make_dataset(image_dataset, "train", batch_size=5, seed=3,
                                  features=["key"])
    assert sorted(keys_of(dataset)) == manifest_keys(image_dataset, "train")


def test_make_dataset_shuffle_is_repeatable_with_seed(image_dataset):
    def order(seed):
        return keys_of(reader.make_dataset(image_dataset, "train", batch_size=7,
                                           seed=seed, num_epochs=2, features=["key"]))

    first = order(11)
    assert first == order(11)
    assert first != order(12)
    assert sorted(first) == sorted(manifest_keys(image_dataset, "train") * 2)
    n = len(first) // 2
    assert first[:n] != first[n:]  # The second pass is reshuffled.


def test_make_dataset_epochs_reshuffle_when_iterated_again(image_dataset):
    # Keras re-iterates a num_epochs=1 dataset each epoch: strict epochs, new order.
    dataset = reader.make_dataset(image_dataset, "train", batch_size=7, seed=11,
                                  features=["key"])
    first, second = keys_of(dataset), keys_of(dataset)
    assert first != second
    assert sorted(first) == sorted(second) == manifest_keys(image_dataset, "train")


def test_make_dataset_does_not_shuffle_eval_splits_by_default(image_dataset):
    a = keys_of(reader.make_dataset(image_dataset, "validation", batch_size=3,
                                    features=["key"]))
    b = keys_of(reader.make_dataset(image_dataset, "validation", batch_size=3,
                                    features=["key"]))
    assert a == b


@pytest.mark.parametrize("num_workers", [2, NUM_SHARDS + 3])  # files, then records
def test_make_dataset_input_context_covers_each_record_once(image_dataset, num_workers):
    seen = []
    for worker in range(num_workers):
        context = tf.distribute.InputContext(num_input_pipelines=num_workers,
                                             input_pipeline_id=worker)
        config = reader.ReadConfig(input_context=context)
        seen += keys_of(reader.make_dataset(image_dataset, "train", batch_size=4, seed=5,
                                            features=["key"], read_config=config))
    assert sorted(seen) == manifest_keys(image_dataset, "train")


def test_make_dataset_augments_after_cache(image_dataset, tmp_path):
    """Cached pixels are reused, yet each epoch is augmented afresh."""
    def images_by_key(dataset):
        out: dict[str, list[np.ndarray]] = collections.defaultdict(list)
        for features, _ in dataset.as_numpy_iterator():
            for key, image in zip(features["key"], features["image"], strict=True):
                out[key.decode()].append(image)
        return out

    cache_path = str(tmp_path / "cache")
    plain = images_by_key(reader.make_dataset(
        image_dataset, "train", batch_size=8, seed=1, num_epochs=2, cache=cache_path,
        features=["key", "image"]))
    assert all(np.array_equal(a, b) for a, b in plain.values())
    assert any(name.startswith("cache") for name in os.listdir(tmp_path))
    augmented = images_by_key(reader.make_dataset(
        image_dataset, "train", batch_size=8, seed=1, num_epochs=2, cache="memory",
        augment=reader.Augmentation(crop_padding=2), features=["key", "image"]))
    changed = [not np.array_equal(a, b) for a, b in augmented.values()]
    assert sum(changed) > 0.9 * len(changed)


def test_make_dataset_augmentation_repeats_with_seed(image_dataset):
    def first_batch(seed):
        dataset = reader.make_dataset(image_dataset, "train", batch_size=8, seed=seed,
                                      augment=True)
        return next(iter(dataset))[0].numpy()

    assert np.array_equal(first_batch(4), first_batch(4))
    assert not np.array_equal(first_batch(4), first_batch(5))


def test_make_dataset_snapshot_persists_decoded_stream(image_dataset, tmp_path):
    path = str(tmp_path / "snap")
    first = keys_of(reader.make_dataset(image_dataset, "train", batch_size=8,
                                        snapshot=path, shuffle=False, features=["key"]))
    assert os.listdir(path)  # Written on the first pass, reused after a restart.
    again = keys_of(reader.make_dataset(image_dataset, "train", batch_size=8,
                                        snapshot=path, shuffle=False, features=["key"]))
    assert sorted(first) == sorted(again) == manifest_keys(image_dataset, "train")


def test_make_dataset_balance_equalises_classes(image_dataset):
    info = reader.open_dataset(image_dataset)
    train_counts = info.label_counts("train")
    counts: collections.Counter = collections.Counter()
    for _, labels in reader.make_dataset(image_dataset, "train", batch_size=16, seed=2,
                                         balance=True, num_epochs=20).as_numpy_iterator():
        counts.update(info.label_vocab[i] for i in labels)
    rarest = min(train_counts.values())
    assert set(counts) == set(CLASS_SIZES)
    for name in CLASS_SIZES:
        # Each class gives ~rarest examples per epoch (binomial, 20 epochs).
        assert abs(counts[name] / 20 - rarest) <= 0.25 * rarest, (name, counts)


def test_make_dataset_drop_remainder_gives_static_batch(image_dataset):
    dataset = reader.make_dataset(image_dataset, "train", batch_size=8, drop_remainder=True)
    assert dataset.element_spec[0].shape[0] == 8
    steps = reader.steps_per_epoch(image_dataset, "train", 8, drop_remainder=True)
    assert sum(1 for _ in dataset) == steps


def test_steps_per_epoch_matches_batches(image_dataset):
    dataset = reader.make_dataset(image_dataset, "validation", batch_size=3)
    assert sum(1 for _ in dataset) == reader.steps_per_epoch(image_dataset, "validation", 3)


def test_label_vocabulary_and_transform_output(image_dataset):
    vocab = reader.label_vocabulary(image_dataset)
    assert sorted(vocab) == sorted(CLASS_SIZES)
    output = reader.transform_output(image_dataset)
    assert contract.IMAGE_KEY in output.transformed_feature_spec()


def test_make_dataset_rejects_unknown_feature(image_dataset):
    with pytest.raises(ValueError, match="nope"):
        reader.make_dataset(image_dataset, features=["nope"])


def test_make_dataset_feeds_keras_fit_and_loss_goes_down(image_dataset):
    tf.keras.utils.set_random_seed(0)
    num_classes = len(reader.label_vocabulary(image_dataset))
    model = tf.keras.Sequential([
        tf.keras.Input((TEST_IMAGE_SIZE, TEST_IMAGE_SIZE, 3)),
        tf.keras.layers.GlobalAveragePooling2D(),
        tf.keras.layers.Dense(num_classes),
    ])
    model.compile(optimizer=tf.keras.optimizers.Adam(0.05),
                  loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    train = reader.make_dataset(image_dataset, "train", batch_size=16, seed=0)
    history = model.fit(train, epochs=6, verbose=0)
    losses = history.history["loss"]
    assert losses[-1] < 0.5 * losses[0], losses


def test_make_dataset_reads_through_tf_data_service(image_dataset):
    dispatcher = tf.data.experimental.service.DispatchServer()
    address = dispatcher.target.split("://")[1]
    worker = tf.data.experimental.service.WorkerServer(  # noqa: F841 (kept alive)
        tf.data.experimental.service.WorkerConfig(dispatcher_address=address))
    config = reader.ReadConfig(data_service=dispatcher.target)
    dataset = reader.make_dataset(image_dataset, "train", batch_size=4, seed=0,
                                  features=["key"], read_config=config)
    assert sorted(keys_of(dataset)) == manifest_keys(image_dataset, "train")


def test_make_dataset_prefetches_to_device(image_dataset):
    # CI has no GPU; the CPU device exercises the same final transformation.
    dataset = reader.make_dataset(image_dataset, "validation", batch_size=4,
                                  read_config=reader.ReadConfig(prefetch_to_device="/cpu:0"))
    assert sum(int(labels.shape[0]) for _, labels in dataset) == reader.open_dataset(
        image_dataset).num_records("validation")


def test_make_dataset_works_with_distribute_datasets_from_function(image_dataset):
    strategy = tf.distribute.MirroredStrategy(["/cpu:0"])
    global_batch = 8

    def dataset_fn(context: tf.distribute.InputContext) -> tf.data.Dataset:
        return reader.make_dataset(image_dataset, "train",
                                   context.get_per_replica_batch_size(global_batch),
                                   seed=0, features=["key"],
                                   read_config=reader.ReadConfig(input_context=context))

    distributed = strategy.distribute_datasets_from_function(dataset_fn)
    keys = [k.decode() for features, _ in distributed
            for k in strategy.experimental_local_results(features["key"])[0].numpy()]
    assert sorted(keys) == manifest_keys(image_dataset, "train")


def test_read_config_rejects_data_service_with_input_context():
    context = tf.distribute.InputContext(num_input_pipelines=2, input_pipeline_id=0)
    with pytest.raises(ValueError, match="distributed_epoch"):
        reader.ReadConfig(data_service="grpc://localhost:1", input_context=context)


def shuffle_buffer_sizes(dataset: tf.data.Dataset) -> list[int]:
    """Buffer sizes of the shuffle ops in ``dataset``'s graph, in graph order."""
    graph = tf.compat.v1.GraphDef()
    graph.ParseFromString(dataset._as_serialized_graph().numpy())
    nodes = {node.name: node for node in graph.node}
    return [int(tf.make_ndarray(nodes[node.input[1]].attr["value"].tensor))
            for node in graph.node if node.op.startswith("ShuffleDataset")]


def fake_info(num_records: int, num_bytes: int, image_size: int = 224) -> reader.DatasetInfo:
    manifest = {"splits": {"train": {"num_records": num_records, "num_bytes": num_bytes,
                                     "shards": []}},
                "preprocessing": {"image_size": image_size, "image_format": "jpeg"},
                "features": {}, "label_vocab": [], "label_counts": {}}
    return reader.DatasetInfo(data_dir="unused", manifest=manifest, kind="images")


@pytest.mark.parametrize(("num_records", "record_bytes", "expected"), [
    (300, 1_000, 300),                # the whole split fits
    (50_000, 1_000, 10_000),          # capped at 10,000 records
    (1_000_000, 100_000, 2_684),      # 256 MiB / 100,000 B = 2,684.35
])
def test_default_shuffle_buffer_is_the_smallest_of_split_cap_and_memory(
        num_records, record_bytes, expected):
    info = fake_info(num_records, num_records * record_bytes)
    assert pipeline.default_shuffle_buffer(info, "train", decoded=False) == expected


def test_default_shuffle_buffer_of_decoded_images_counts_pixels():
    # After a cache, 224 px RGB records take 150,528 B: 268,435,456 / 150,528 = 1,783.3.
    info = fake_info(50_000, 50_000 * 20_000)
    assert pipeline.default_shuffle_buffer(info, "train", decoded=True) == 1_783


def test_make_dataset_default_shuffle_buffer_holds_the_small_split(image_dataset):
    dataset = reader.make_dataset(image_dataset, "train", batch_size=8, seed=0)
    train_records = reader.open_dataset(image_dataset).num_records("train")
    # The shard list (4 files) is shuffled whole, then every record of the split.
    assert shuffle_buffer_sizes(dataset) == [NUM_SHARDS, train_records]


def test_make_dataset_shuffle_buffer_option_sets_the_record_buffer(image_dataset):
    config = reader.ReadConfig(shuffle_buffer=5)
    dataset = reader.make_dataset(image_dataset, "train", batch_size=8, seed=0,
                                  read_config=config)
    assert shuffle_buffer_sizes(dataset) == [NUM_SHARDS, 5]


def test_make_dataset_num_epochs_none_repeats_the_split_forever(image_dataset):
    dataset = reader.make_dataset(image_dataset, "train", batch_size=5, shuffle=False,
                                  num_epochs=None, features=["key"])
    assert dataset.cardinality() == tf.data.INFINITE_CARDINALITY
    one_epoch = keys_of(reader.make_dataset(image_dataset, "train", batch_size=5,
                                            shuffle=False, features=["key"]))
    n = len(one_epoch)
    stream = [k.decode() for features, _ in dataset.take(3 * n // 5 + 1).as_numpy_iterator()
              for k in features["key"]][:3 * n]
    assert stream == one_epoch * 3


def test_make_dataset_nondeterministic_reads_every_record_once(image_dataset):
    config = reader.ReadConfig(deterministic=False)
    dataset = reader.make_dataset(image_dataset, "train", batch_size=5, features=["key"],
                                  read_config=config)
    assert dataset.options().deterministic is False
    assert sorted(keys_of(dataset)) == manifest_keys(image_dataset, "train")


def test_make_dataset_data_service_job_splits_one_epoch_between_consumers(image_dataset):
    dispatcher = tf.data.experimental.service.DispatchServer()
    worker = tf.data.experimental.service.WorkerServer(  # noqa: F841 (kept alive)
        tf.data.experimental.service.WorkerConfig(
            dispatcher_address=dispatcher.target.split("://")[1]))
    config = reader.ReadConfig(data_service=dispatcher.target, data_service_job="shared")
    consumers = [iter(reader.make_dataset(image_dataset, "train", batch_size=4, seed=0,
                                          features=["key"], read_config=config))
                 for _ in range(2)]
    seen: list[list[str]] = [[], []]
    active = [0, 1]
    while active:  # Take turns, as two trainers stepping together would.
        for i in list(active):
            try:
                features, _ = next(consumers[i])
            except StopIteration:
                active.remove(i)
                continue
            seen[i] += [k.decode() for k in features["key"].numpy()]
    # Together the consumers read the epoch exactly once (a consumer reading its own
    # copy would duplicate keys). How the service deals the elements out depends on
    # timing: on a loaded machine one consumer can take them all.
    assert sorted(seen[0] + seen[1]) == manifest_keys(image_dataset, "train")


def test_read_config_rejects_data_service_job_without_service():
    with pytest.raises(ValueError, match="data_service"):
        reader.ReadConfig(data_service_job="shared")


def test_make_dataset_rejects_zero_epochs(image_dataset):
    with pytest.raises(ValueError, match="num_epochs"):
        reader.make_dataset(image_dataset, num_epochs=0)
