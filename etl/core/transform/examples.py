"""Transformed instance dict → serialized ``tf.train.Example``, deterministically."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import tensorflow as tf


def _feature(name: str, value: Any) -> tf.train.Feature:
    # Byte strings never go through np.asarray: numpy's "S" dtype drops trailing
    # NUL bytes, which would corrupt encoded or raw images.
    if isinstance(value, (bytes, str)):
        value = [value]
    if isinstance(value, list) or (isinstance(value, np.ndarray) and value.dtype == object):
        items = list(np.asarray(value, dtype=object).reshape(-1))
        if all(isinstance(v, (bytes, str)) for v in items):
            encoded = [v.encode("utf-8") if isinstance(v, str) else v for v in items]
            return tf.train.Feature(bytes_list=tf.train.BytesList(value=encoded))
    values = np.asarray(value).reshape(-1)
    kind = values.dtype.kind
    if kind in ("i", "u", "b"):
        return tf.train.Feature(int64_list=tf.train.Int64List(value=values.astype(np.int64)))
    if kind == "f":
        return tf.train.Feature(float_list=tf.train.FloatList(value=values.astype(np.float32)))
    raise TypeError(f"Feature {name!r} has unsupported dtype {values.dtype} ({value!r:.80}).")


def serialize_example(instance: Mapping[str, Any]) -> bytes:
    """Serializes one instance (feature name → scalar or array) as a tf.train.Example.

    ``deterministic=True`` fixes the order of the proto's feature map, so the same
    instance always gives the same bytes (the map order is otherwise unspecified).
    """
    features = {name: _feature(name, instance[name]) for name in sorted(instance)}
    example = tf.train.Example(features=tf.train.Features(feature=features))
    return example.SerializeToString(deterministic=True)
