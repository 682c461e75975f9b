"""Unit tests of etl/timeseries/window_examples.py: the same bytes as serialize_example."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from etl.core.transform.examples import serialize_example
from etl.timeseries.window_examples import WindowSchema

STARTS = ["2024-01-01 00:00:00", "17", "", "é" * 70, "x" * 200, "2024-01-01 00:00:01"]


def _instance(series_id, start, window, target=None, label=None, label_id=0) -> dict:
    instance = {"window": window, "series_id": series_id, "window_start": start,
                "key": f"{series_id}@{start}"}
    if label is None:
        instance["target"] = target
    else:
        instance.update(label=np.int64(label_id), label_name=label)
    return instance


@pytest.mark.parametrize("series_id", ["s", "ü" * 70])
def test_encode_forecast_windows_equals_serialize_example(series_id):
    rng = np.random.default_rng(0)
    windows = rng.normal(size=(len(STARTS), 5, 2)).astype(np.float32)
    targets = rng.normal(size=(len(STARTS), 3, 2)).astype(np.float32)
    got = WindowSchema(5, 3, 2, classification=False).encode(
        [series_id] * len(STARTS), STARTS, windows, targets)
    assert got == [serialize_example(_instance(series_id, s, windows[i], targets[i]))
                   for i, s in enumerate(STARTS)]


@pytest.mark.parametrize(("label", "label_id"), [("cat", 0), ("dog", 300), ("x" * 200, -1)])
def test_encode_labelled_windows_equals_serialize_example(label, label_id):
    windows = np.arange(len(STARTS) * 4, dtype=np.float32).reshape(len(STARTS), 4, 1)
    got = WindowSchema(4, 0, 1, classification=True).encode(
        ["s1"] * len(STARTS), STARTS, windows, labels=[label] * len(STARTS),
        label_ids=[label_id] * len(STARTS))
    assert got == [serialize_example(_instance("s1", s, windows[i], label=label,
                                               label_id=label_id))
                   for i, s in enumerate(STARTS)]


def test_encoded_windows_parse_back_with_the_documented_spec():
    windows = np.array([[[1.5], [-0.0], [np.float32(3e38)]]], np.float32)
    [record] = WindowSchema(3, 1, 1, classification=False).encode(
        ["a"], ["t0"], windows, np.array([[[7.0]]], np.float32))
    parsed = tf.io.parse_single_example(record, {
        "window": tf.io.FixedLenFeature([3, 1], tf.float32),
        "target": tf.io.FixedLenFeature([1, 1], tf.float32),
        "key": tf.io.FixedLenFeature([], tf.string)})
    np.testing.assert_array_equal(parsed["window"].numpy(), windows[0])
    assert parsed["key"].numpy() == b"a@t0"


def test_encode_mixes_series_labels_and_lengths_in_one_call():
    rng = np.random.default_rng(1)
    n = 40
    series = [rng.choice(["a", "bb", "é" * 3, "x" * 130]) for _ in range(n)]
    starts = [rng.choice(STARTS) for _ in range(n)]
    labels = [rng.choice(["cat", "dog", "hippopotamus"]) for _ in range(n)]
    label_ids = [int(rng.choice([0, 1, 127, 128, 300, -1])) for _ in range(n)]
    windows = rng.normal(size=(n, 2, 1)).astype(np.float32)
    got = WindowSchema(2, 0, 1, classification=True).encode(
        series, starts, windows, labels=labels, label_ids=label_ids)
    assert got == [serialize_example(_instance(series[i], starts[i], windows[i],
                                               label=labels[i], label_id=label_ids[i]))
                   for i in range(n)]


def test_encode_nothing_is_an_empty_list():
    assert WindowSchema(2, 1, 1, False).encode([], [], np.zeros([0, 2, 1]),
                                               np.zeros([0, 1, 1])) == []


@pytest.mark.parametrize("classification", [False, True])
def test_example_bytes_is_the_serialized_size(classification):
    schema = WindowSchema(6, 0 if classification else 2, 3, classification)
    for series_id in ("s", "é" * 100):
        for start in STARTS:
            instance = _instance(series_id, start, np.zeros([6, 3], np.float32),
                                 np.zeros([2, 3], np.float32),
                                 "label" if classification else None, 5)
            assert schema.example_bytes(
                len(series_id.encode()), len(start.encode()),
                len(b"label") if classification else 0, 5) == len(
                    serialize_example(instance))
