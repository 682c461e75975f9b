"""Unit tests of etl/core/transform/examples.py: deterministic tf.train.Example serialization."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from etl.core.transform import examples


def _parse(serialized: bytes) -> dict[str, tf.train.Feature]:
    return dict(tf.train.Example.FromString(serialized).features.feature)


def test_serialize_example_bytes_scalar():
    feature = _parse(examples.serialize_example({"image": b"\x89PNG\x01"}))["image"]
    assert list(feature.bytes_list.value) == [b"\x89PNG\x01"]


def test_serialize_example_str_is_utf8():
    feature = _parse(examples.serialize_example({"label_name": "chat noir é"}))["label_name"]
    assert list(feature.bytes_list.value) == ["chat noir é".encode()]


def test_serialize_example_int_scalar():
    feature = _parse(examples.serialize_example({"label": 7}))["label"]
    assert list(feature.int64_list.value) == [7]


def test_serialize_example_large_negative_int():
    feature = _parse(examples.serialize_example({"n": -(2**40)}))["n"]
    assert list(feature.int64_list.value) == [-(2**40)]


def test_serialize_example_bool_is_int64():
    feature = _parse(examples.serialize_example({"flag": np.array([True, False])}))["flag"]
    assert list(feature.int64_list.value) == [1, 0]


def test_serialize_example_float_scalar_is_float32():
    feature = _parse(examples.serialize_example({"x": 0.1}))["x"]
    assert list(feature.float_list.value) == [np.float32(0.1)]


def test_serialize_example_int_array_is_flattened():
    value = np.array([[1, 2, 3], [4, 5, 6]], np.int32)
    feature = _parse(examples.serialize_example({"shape": value}))["shape"]
    assert list(feature.int64_list.value) == [1, 2, 3, 4, 5, 6]


def test_serialize_example_float_array():
    value = np.array([0.5, -1.25, 3.0], np.float64)
    feature = _parse(examples.serialize_example({"f": value}))["f"]
    assert list(feature.float_list.value) == [0.5, -1.25, 3.0]


def test_serialize_example_object_array_of_bytes():
    value = np.array([b"a", b"bc\x00"], dtype=object)
    feature = _parse(examples.serialize_example({"b": value}))["b"]
    assert list(feature.bytes_list.value) == [b"a", b"bc\x00"]


def test_serialize_example_zero_dim_object_array_of_bytes():
    value = np.array(b"raw\x00\x00", dtype=object)
    feature = _parse(examples.serialize_example({"b": value}))["b"]
    assert list(feature.bytes_list.value) == [b"raw\x00\x00"]


def test_serialize_example_list_of_str():
    feature = _parse(examples.serialize_example({"tags": ["a", "b"]}))["tags"]
    assert list(feature.bytes_list.value) == [b"a", b"b"]


def test_serialize_example_keeps_every_feature():
    instance = {"image": b"img", "label": 2, "label_name": "cat", "height": np.int64(4)}
    assert sorted(_parse(examples.serialize_example(instance))) == [
        "height", "image", "label", "label_name"]


@pytest.mark.parametrize("value", [
    b"\x00", b"abc\x00", b"abc\x00\x00\x00", np.array([b"abc\x00"], dtype=object),
])
def test_serialize_example_preserves_trailing_nul_bytes(value):
    feature = _parse(examples.serialize_example({"image": value}))["image"]
    assert list(feature.bytes_list.value) == [
        value if isinstance(value, bytes) else value[0]]


def test_serialize_example_raw_image_round_trips_through_parse_example():
    pixels = np.zeros((2, 2, 3), np.uint8)
    pixels[0, 0] = (255, 1, 2)  # Every byte after the first three is NUL.
    serialized = examples.serialize_example({"image": pixels.tobytes(), "label": 1})
    parsed = tf.io.parse_single_example(serialized, {
        "image": tf.io.FixedLenFeature([], tf.string),
        "label": tf.io.FixedLenFeature([], tf.int64)})
    assert parsed["image"].numpy() == pixels.tobytes()
    assert int(parsed["label"]) == 1


def test_serialize_example_same_instance_gives_same_bytes():
    a = {"image": b"xyz", "label": 3, "label_name": "dog", "key": "dog/1.png",
         "height": 16, "width": 16, "channels": 3}
    b = dict(reversed(list(a.items())))
    assert list(a) != list(b)
    assert examples.serialize_example(a) == examples.serialize_example(b)


def test_serialize_example_frozen_bytes():
    # Features in sorted name order ("image" before "label") whatever the dict order.
    assert examples.serialize_example({"label": 1, "image": b"x"}) == (
        b"\n \n\x0e\n\x05image\x12\x05\n\x03\n\x01x"
        b"\n\x0e\n\x05label\x12\x05\x1a\x03\n\x01\x01")


def test_serialize_example_rejects_numpy_bytes_dtype():
    # numpy "S" arrays drop trailing NUL bytes, so they must not be accepted silently.
    with pytest.raises(TypeError, match="'image' has unsupported dtype"):
        examples.serialize_example({"image": np.array([b"abc\x00"])})


def test_serialize_example_rejects_numpy_unicode_dtype():
    with pytest.raises(TypeError, match="'name' has unsupported dtype"):
        examples.serialize_example({"name": np.array(["cat"])})
