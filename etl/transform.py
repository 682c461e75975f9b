"""tf.Transform stage shared by the jobs: analyze on train, transform every split."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import apache_beam as beam
import tensorflow_transform.beam as tft_beam
from tensorflow_transform.tf_metadata import dataset_metadata

from etl import contract
from etl.examples import serialize_example
from etl.sharding import KeyedExample

ANALYZE = "analyze"


def to_keyed_example(instance: Mapping[str, Any], split: str) -> KeyedExample:
    """Serializes a transformed instance, keyed by its ``key`` feature for sharding."""
    key = instance[contract.SOURCE_KEY]
    key = key.decode("utf-8") if isinstance(key, bytes) else str(key)
    return KeyedExample(split, key, serialize_example(instance))


class AnalyzeAndTransform(beam.PTransform):
    """Fits ``preprocessing_fn``'s analyzers on one dataset, applies it to every split.

    Input: a dict of PCollections of raw instance dicts (``raw_feature_spec``):
    ``"analyze"`` (what the analyzers see: the train split, or a train-only view of
    it) and one entry per split of ``contract.SPLITS``.

    Output: ``(examples, transform_written)``: a PCollection of ``KeyedExample`` for
    all splits, and the PCollection ``tft_beam.WriteTransformFn`` returns once
    ``transform_fn/`` and ``transformed_metadata/`` are final under ``output_dir``.
    """

    def __init__(self, preprocessing_fn: Callable[[dict], dict],
                 raw_feature_spec: Mapping[str, Any], output_dir: str,
                 temp_dir: str) -> None:
        super().__init__()
        self._preprocessing_fn = preprocessing_fn
        self._raw_feature_spec = dict(raw_feature_spec)
        self._output_dir = output_dir
        self._temp_dir = temp_dir

    def expand(self, raw: dict[str, beam.PCollection]) -> tuple[beam.PCollection, Any]:
        metadata = dataset_metadata.DatasetMetadata.from_feature_spec(self._raw_feature_spec)
        examples = []
        with tft_beam.Context(temp_dir=self._temp_dir):
            transform_fn = (
                (raw[ANALYZE], metadata)
                | "AnalyzeTrain" >> tft_beam.AnalyzeDataset(self._preprocessing_fn))
            transform_written = transform_fn | "WriteTransformFn" >> (
                tft_beam.WriteTransformFn(self._output_dir))
            for split in contract.SPLITS:
                transformed, _ = (
                    ((raw[split], metadata), transform_fn)
                    | f"Transform[{split}]" >> tft_beam.TransformDataset())
                examples.append(transformed | f"Serialize[{split}]" >> beam.Map(
                    to_keyed_example, split=split))
        return examples | "FlattenSplits" >> beam.Flatten(), transform_written
