"""make_dataset on time-series datasets written by the real time-series job."""

from __future__ import annotations

import numpy as np
import tensorflow as tf

import reader
from tests.reader.helpers import (
    FORECAST_HORIZON,
    FORECAST_WINDOW,
    LABELLED_WINDOW,
    series_label,
)


def test_make_dataset_forecast_yields_windows_and_targets(forecast_dataset):
    windows, targets = next(iter(reader.make_dataset(forecast_dataset, "train", 4)))
    assert windows.dtype == targets.dtype == tf.float32
    assert windows.shape == (4, FORECAST_WINDOW, 1)
    assert targets.shape == (4, FORECAST_HORIZON, 1)


def test_make_dataset_classification_yields_windows_and_label_ids(labelled_series_dataset):
    vocab = reader.label_vocabulary(labelled_series_dataset)
    dataset = reader.make_dataset(labelled_series_dataset, "train", 4,
                                  features=["window", "series_id"])
    assert dataset.element_spec[1] == tf.TensorSpec([None], tf.int64)
    count = 0
    for features, labels in dataset.as_numpy_iterator():
        assert features["window"].shape[1:] == (LABELLED_WINDOW, 1)
        for series_id, label in zip(features["series_id"], labels, strict=True):
            assert vocab[label] == series_label(series_id.decode())
            count += 1
    assert count == reader.open_dataset(labelled_series_dataset).num_records("train")


def test_make_dataset_classification_default_input_is_the_window(labelled_series_dataset):
    windows, labels = next(iter(reader.make_dataset(labelled_series_dataset, "train", 3)))
    assert windows.shape == (3, LABELLED_WINDOW, 1) and windows.dtype == tf.float32
    # Rising and falling series: normalised windows still rise or fall with the label.
    vocab = reader.label_vocabulary(labelled_series_dataset)
    for window, label in zip(windows.numpy(), labels.numpy(), strict=True):
        rising = window[-1, 0] > window[0, 0]
        assert rising == (vocab[label] == "up")
    assert np.all(np.isfinite(windows.numpy()))
