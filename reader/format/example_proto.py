"""``tf.train.Example`` protos parsed without TensorFlow, into NumPy by feature spec.

The message types are TensorFlow's ``example.proto`` and ``feature.proto``, declared
here as a protobuf descriptor in their own private pool (so a process that also
imports TensorFlow keeps both without a name clash) and parsed by the ``protobuf``
runtime; nothing here parses wire bytes by hand.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, text_format

# tensorflow/core/example/{example,feature}.proto, the fields every Example uses.
_EXAMPLE_PROTO = """
name: "tfrecord_etl/example.proto"
package: "tensorflow"
syntax: "proto3"
message_type {
  name: "BytesList"
  field { name: "value" number: 1 label: LABEL_REPEATED type: TYPE_BYTES }
}
message_type {
  name: "FloatList"
  field { name: "value" number: 1 label: LABEL_REPEATED type: TYPE_FLOAT
          options { packed: true } }
}
message_type {
  name: "Int64List"
  field { name: "value" number: 1 label: LABEL_REPEATED type: TYPE_INT64
          options { packed: true } }
}
message_type {
  name: "Feature"
  field { name: "bytes_list" number: 1 label: LABEL_OPTIONAL type: TYPE_MESSAGE
          type_name: ".tensorflow.BytesList" oneof_index: 0 }
  field { name: "float_list" number: 2 label: LABEL_OPTIONAL type: TYPE_MESSAGE
          type_name: ".tensorflow.FloatList" oneof_index: 0 }
  field { name: "int64_list" number: 3 label: LABEL_OPTIONAL type: TYPE_MESSAGE
          type_name: ".tensorflow.Int64List" oneof_index: 0 }
  oneof_decl { name: "kind" }
}
message_type {
  name: "Features"
  field { name: "feature" number: 1 label: LABEL_REPEATED type: TYPE_MESSAGE
          type_name: ".tensorflow.Features.FeatureEntry" }
  nested_type {
    name: "FeatureEntry"
    field { name: "key" number: 1 label: LABEL_OPTIONAL type: TYPE_STRING }
    field { name: "value" number: 2 label: LABEL_OPTIONAL type: TYPE_MESSAGE
            type_name: ".tensorflow.Feature" }
    options { map_entry: true }
  }
}
message_type {
  name: "Example"
  field { name: "features" number: 1 label: LABEL_OPTIONAL type: TYPE_MESSAGE
          type_name: ".tensorflow.Features" }
}
"""


def _example_class() -> Any:
    pool = descriptor_pool.DescriptorPool()
    pool.Add(text_format.Parse(_EXAMPLE_PROTO, descriptor_pb2.FileDescriptorProto()))
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("tensorflow.Example"))


Example = _example_class()

# The manifest's dtype names (``reader.tfdata.feature_specs.feature_spec_to_json``) →
# the list each is stored in and its NumPy type.
_LISTS = {"string": ("bytes_list", None), "float32": ("float_list", np.float32),
          "int64": ("int64_list", np.int64)}


class ExampleParseError(ValueError):
    """A record is not an Example of the dataset's features."""


def parse_example(serialized: bytes, features: Mapping[str, Mapping[str, Any]]
                  ) -> dict[str, Any]:
    """One serialized Example → ``{name: value}`` for each feature the manifest's
    ``features`` describes, as ``tf.io.parse_single_example`` would give it:

    * ``fixed_len`` numbers: an array of the feature's shape (a NumPy scalar for
      shape ``[]``); ``var_len`` numbers: a 1-D array;
    * strings stay ``bytes`` (a list of ``bytes`` for ``var_len`` and for fixed
      shapes other than ``[]``): the caller decides which are text.

    Raises:
        ExampleParseError: the bytes are no Example, or a feature is missing, has
            another type, or another number of values than its shape.
    """
    try:
        example = Example.FromString(serialized)
    except Exception as e:  # protobuf's DecodeError, whatever the backend
        raise ExampleParseError(f"not a tf.train.Example ({e})") from e
    stored = example.features.feature
    parsed: dict[str, Any] = {}
    for name, spec in features.items():
        list_name, dtype = _LISTS[spec["dtype"]]
        feature = stored.get(name)
        if feature is None or feature.WhichOneof("kind") not in (list_name, None):
            kind = None if feature is None else feature.WhichOneof("kind")
            if spec["kind"] == "var_len" and feature is None:
                values: Any = []
            else:
                raise ExampleParseError(f"feature {name!r} is {kind or 'missing'}, the "
                                        f"manifest says {spec['dtype']} {spec['kind']}")
        else:
            values = getattr(feature, list_name).value
        parsed[name] = _shaped(name, values, spec, dtype)
    return parsed


def _shaped(name: str, values: Any, spec: Mapping[str, Any], dtype: Any) -> Any:
    if spec["kind"] == "var_len":
        return list(values) if dtype is None else np.asarray(values, dtype)
    shape = [int(d) for d in spec["shape"]]
    size = int(np.prod(shape)) if shape else 1
    if len(values) != size:
        raise ExampleParseError(f"feature {name!r} holds {len(values)} values, its "
                                f"shape {shape} needs {size}")
    if dtype is None:
        return values[0] if not shape else list(values)
    array = np.asarray(values, dtype).reshape(shape)
    return array[()] if not shape else array
