"""reader/tfdata/feature_specs.py: the manifest's features ↔ tf.io parse specs."""

from __future__ import annotations

import json

import pytest
import tensorflow as tf

from reader.tfdata.feature_specs import feature_spec_from_json, feature_spec_to_json

SPEC = {
    "image": tf.io.FixedLenFeature([], tf.string),
    "label": tf.io.FixedLenFeature([], tf.int64),
    "shape": tf.io.FixedLenFeature([3], tf.int64),
    "score": tf.io.FixedLenFeature([2, 2], tf.float32),
    "tags": tf.io.VarLenFeature(tf.string),
}


def test_feature_spec_to_json_describes_specs():
    assert feature_spec_to_json(SPEC) == {
        "image": {"kind": "fixed_len", "dtype": "string", "shape": []},
        "label": {"kind": "fixed_len", "dtype": "int64", "shape": []},
        "score": {"kind": "fixed_len", "dtype": "float32", "shape": [2, 2]},
        "shape": {"kind": "fixed_len", "dtype": "int64", "shape": [3]},
        "tags": {"kind": "var_len", "dtype": "string"},
    }


def test_feature_spec_to_json_sorts_names():
    assert list(feature_spec_to_json(SPEC)) == sorted(SPEC)


def test_feature_spec_json_round_trip():
    described = json.loads(json.dumps(feature_spec_to_json(SPEC)))
    assert feature_spec_from_json(described) == SPEC


def test_feature_spec_to_json_rejects_other_spec_types():
    with pytest.raises(TypeError, match="'x' has unsupported spec type"):
        feature_spec_to_json({"x": tf.io.RaggedFeature(tf.int64)})


def test_feature_spec_from_json_rejects_unknown_kind():
    with pytest.raises(ValueError, match="'x' has unknown kind 'sparse'"):
        feature_spec_from_json({"x": {"kind": "sparse", "dtype": "int64"}})
