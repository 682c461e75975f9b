"""The manifest's ``features`` entry ↔ the ``tf.io`` parse spec it describes."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import tensorflow as tf


def feature_spec_to_json(feature_spec: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Describes a ``tf.io`` feature spec as plain JSON (for the manifest).

    Only ``tf.io.FixedLenFeature`` and ``tf.io.VarLenFeature`` occur in our outputs;
    anything else is a programming error and raises ``TypeError``.
    """
    described: dict[str, dict[str, Any]] = {}
    for name in sorted(feature_spec):
        spec = feature_spec[name]
        if isinstance(spec, tf.io.FixedLenFeature):
            described[name] = {
                "kind": "fixed_len",
                "dtype": tf.as_dtype(spec.dtype).name,
                "shape": [int(d) for d in spec.shape],
            }
        elif isinstance(spec, tf.io.VarLenFeature):
            described[name] = {"kind": "var_len", "dtype": tf.as_dtype(spec.dtype).name}
        else:
            raise TypeError(f"Feature {name!r} has unsupported spec type {type(spec)}.")
    return described


def feature_spec_from_json(described: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """Inverse of :func:`feature_spec_to_json`: the spec for ``tf.io.parse_example``."""
    spec: dict[str, Any] = {}
    for name, desc in described.items():
        dtype = tf.as_dtype(desc["dtype"])
        if desc["kind"] == "fixed_len":
            spec[name] = tf.io.FixedLenFeature(list(desc["shape"]), dtype)
        elif desc["kind"] == "var_len":
            spec[name] = tf.io.VarLenFeature(dtype)
        else:
            raise ValueError(f"Feature {name!r} has unknown kind {desc['kind']!r}.")
    return spec
