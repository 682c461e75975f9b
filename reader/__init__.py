"""Reads the ETL's sharded TFRecord datasets with tf.data (no Apache Beam import)."""

from etl.contract import feature_spec_from_json, load_manifest

__all__ = ["feature_spec_from_json", "load_manifest"]
