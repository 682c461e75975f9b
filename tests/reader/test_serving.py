"""Serving the TFX way: a signature built from the job's raw metadata and transform_fn."""

from __future__ import annotations

import os

import numpy as np
import tensorflow as tf

import reader
from tests.reader.helpers import FORECAST_HORIZON, FORECAST_WINDOW, write_coloured_images

RAW_STRING = tf.io.FixedLenFeature([], tf.string)


def raw_example(image_bytes: bytes, label: str, key: str) -> bytes:
    """A serialized raw ``tf.train.Example``, as a client of the serving model sends."""
    def feature(value: bytes) -> tf.train.Feature:
        return tf.train.Feature(bytes_list=tf.train.BytesList(value=[value]))

    return tf.train.Example(features=tf.train.Features(feature={
        "image": feature(image_bytes), "label": feature(label.encode()),
        "key": feature(key.encode())})).SerializeToString()


def stored_examples(data_dir: str, split: str) -> list[dict[str, np.ndarray]]:
    info = reader.open_dataset(data_dir)
    dataset = tf.data.TFRecordDataset(info.shard_paths(split), compression_type="GZIP")
    return [{name: value.numpy() for name, value in
             tf.io.parse_single_example(record, info.feature_spec).items()}
            for record in dataset]


def test_raw_feature_spec_is_the_image_jobs_raw_input(image_dataset):
    assert reader.transform_output(image_dataset).raw_feature_spec() == {
        "image": RAW_STRING, "label": RAW_STRING, "key": RAW_STRING}


def test_raw_feature_spec_is_the_time_series_jobs_raw_window(forecast_dataset):
    assert reader.transform_output(forecast_dataset).raw_feature_spec() == {
        "window": tf.io.FixedLenFeature([FORECAST_WINDOW, 1], tf.float32),
        "target": tf.io.FixedLenFeature([FORECAST_HORIZON, 1], tf.float32),
        "series_id": RAW_STRING, "window_start": RAW_STRING, "key": RAW_STRING}


def test_serving_signature_from_raw_feature_spec_reproduces_stored_examples(
        image_dataset, tmp_path):
    tft_output = reader.transform_output(image_dataset)
    raw_spec = tft_output.raw_feature_spec()
    module = tf.Module()
    module.tft_layer = tft_output.transform_features_layer()

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="examples")])
    def serve(serialized: tf.Tensor) -> dict[str, tf.Tensor]:
        return module.tft_layer(tf.io.parse_example(serialized, raw_spec))

    module.serve = serve
    tf.saved_model.save(module, str(tmp_path / "serving"),
                        signatures={"serving_default": serve})
    signature = tf.saved_model.load(str(tmp_path / "serving")).signatures["serving_default"]

    inputs = str(tmp_path / "inputs")  # The fixture's raw images, written again (seeded).
    write_coloured_images(inputs)
    stored = stored_examples(image_dataset, "validation")
    requests = []
    for example in stored:
        key = example["key"].decode()
        with open(os.path.join(inputs, key), "rb") as f:
            requests.append(raw_example(f.read(), example["label_name"].decode(), key))
    served = {name: value.numpy()
              for name, value in signature(examples=tf.constant(requests)).items()}

    assert len(stored) > 0
    assert sorted(served) == sorted(stored[0])
    for i, example in enumerate(stored):
        for name, value in example.items():  # Byte for byte: encoded images included.
            np.testing.assert_array_equal(served[name][i], value, err_msg=name)
