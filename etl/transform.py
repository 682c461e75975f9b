"""tf.Transform stage shared by the jobs: analyze on train, transform every split.

Data path (chosen by profiling, see docs/RUNNING_AT_SCALE.md):

* Raw instance dicts are gathered here into Arrow ``RecordBatch``es of tf.Transform's
  TFXIO in-memory tf.Example format (``_ToRecordBatches``). Handing tf.Transform
  instance dicts instead makes it encode every instance as a ``tf.train.Example`` and
  decode the batch again, with extra Beam steps per dataset (each a per-bundle cost
  on every runner). The analyze input, usually the train PCollection itself, is
  batched once for both uses.
* Batches are bounded by row count *and* bytes, so a batch of large photos stays
  small in memory while a batch of small ones is large enough to keep every core busy
  inside the transform graph.
* ``TransformDataset(output_record_batches=True)``: transformed batches stay columnar
  and are encoded to ``tf.train.Example`` bytes by tfx_bsl's C++ encoder, instead of
  being exploded into per-instance dicts of numpy arrays and rebuilt in Python.
* One ``TransformDataset`` for all splits: each batch carries its split in a
  tf.Transform *passthrough* column (``SPLIT_COLUMN``: hidden from
  ``preprocessing_fn``, copied to the output batch, never written to an example).
  Three per-split transforms were three runner stages, each loading the graph and
  ending on a partial batch, and their outputs had to be flattened and read once
  more just to measure the splits' sizes (~1 s of 9.5 s for 3,000 images).

The stored bytes are unchanged: ``serialize_example`` of an instance and the
record-batch path give identical bytes (both sort features by name; tested in
tests/pipelines/test_scale.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import apache_beam as beam
import numpy as np
import pyarrow as pa
import tensorflow_transform.beam as tft_beam
from apache_beam.transforms import window
from tensorflow_transform.tf_metadata import dataset_metadata

from etl import contract
from etl.sharding import KeyedExample

ANALYZE = "analyze"
# tf.Transform passthrough column carrying each row's split through TransformDataset
# (tf.Transform refuses it if a raw feature has the same name).
SPLIT_COLUMN = "__split__"
_SPLIT_COLUMN_TYPE = pa.large_list(pa.large_binary())

# Bounds of one batch fed to the transform graph: rows (tfx_bsl's own cap is 1000)
# and raw bytes (encoded images dominate). Output bytes never depend on batching:
# every preprocessing_fn output is computed per instance.
MAX_BATCH_ROWS = 512
MAX_BATCH_BYTES = 16 * 1024 * 1024


def _string_values(value: Any) -> list[bytes]:
    if isinstance(value, (bytes, str)):
        value = [value]
    return [v.encode("utf-8") if isinstance(v, str) else bytes(v)
            for v in np.asarray(value, dtype=object).reshape(-1)]


def instance_bytes(instance: Mapping[str, Any]) -> int:
    """Approximate in-memory size of a raw instance (its batching weight)."""
    size = 0
    for value in instance.values():
        if isinstance(value, (bytes, str)):
            size += len(value)
        else:
            size += int(getattr(value, "nbytes", 8))
    return size


class RecordBatchBuilder:
    """Instance dicts → ``pa.RecordBatch`` in TFXIO's in-memory tf.Example layout.

    Every ``FixedLenFeature`` becomes a ``large_list`` column holding, per instance,
    its values flattened row-major: exactly the batch tf.Transform builds itself from
    instance dicts (``ExampleProtoCoder`` then tfx_bsl's tf.Example decoder), without
    the round trip through serialized tf.Examples. With ``split_column``, every batch
    also holds that column, one ``[split]`` per row (``build``'s ``split``).
    """

    def __init__(self, feature_spec: Mapping[str, Any], arrow_schema: pa.Schema,
                 split_column: str | None = None) -> None:
        self._feature_names = list(arrow_schema.names)
        self._split_column = split_column
        self._schema = (arrow_schema.append(pa.field(split_column, _SPLIT_COLUMN_TYPE))
                        if split_column else arrow_schema)
        self._sizes = {name: int(np.prod(feature_spec[name].shape, dtype=np.int64))
                       for name in self._feature_names}

    @property
    def schema(self) -> pa.Schema:
        """The schema of the batches built: the raw features, then the split column."""
        return self._schema

    def _column(self, name: str, values: Sequence[Any]) -> pa.Array:
        list_type = self._schema.field(name).type
        value_type = list_type.value_type
        size = self._sizes[name]
        if pa.types.is_large_binary(value_type) or pa.types.is_binary(value_type):
            parts = [_string_values(value) for value in values]
            flat = pa.array([v for part in parts for v in part], type=value_type)
            counts = [len(part) for part in parts]
        else:
            dtype = np.int64 if pa.types.is_integer(value_type) else np.float32
            arrays = [np.asarray(value, dtype=dtype).reshape(-1) for value in values]
            flat = pa.array(np.concatenate(arrays) if arrays else np.zeros([0], dtype),
                            type=value_type)
            counts = [array.size for array in arrays]
        for count in counts:
            if count != size:
                raise ValueError(f"Feature {name!r} must have {size} value(s) per "
                                 f"instance, got {count}.")
        offsets = pa.array(np.arange(len(values) + 1, dtype=np.int64) * size)
        return pa.LargeListArray.from_arrays(offsets, flat, type=list_type)

    def build(self, instances: Sequence[Mapping[str, Any]], split: str | None = None
              ) -> pa.RecordBatch:
        if (split is None) != (self._split_column is None):
            raise ValueError("Pass a split exactly when the builder has a split column.")
        columns = [self._column(name, [instance[name] for instance in instances])
                   for name in self._feature_names]
        if self._split_column is not None:
            columns.append(pa.array([[split.encode()]] * len(instances),
                                    _SPLIT_COLUMN_TYPE))
        return pa.RecordBatch.from_arrays(columns, schema=self._schema)


class _ToRecordBatches(beam.DoFn):
    """Gathers one split's instance dicts into record batches of bounded rows and
    bytes, each tagged with the split."""

    def __init__(self, builder: RecordBatchBuilder, max_rows: int, max_bytes: int,
                 split: str | None) -> None:
        self._builder = builder
        self._split = split
        self._max_rows = max_rows
        self._max_bytes = max_bytes

    def start_bundle(self) -> None:
        self._buffer: list[Mapping[str, Any]] = []
        self._bytes = 0

    def process(self, instance: Mapping[str, Any]) -> Iterator[pa.RecordBatch]:
        self._buffer.append(instance)
        self._bytes += instance_bytes(instance)
        if len(self._buffer) >= self._max_rows or self._bytes >= self._max_bytes:
            yield self._flush()

    def finish_bundle(self) -> Iterator[Any]:
        if self._buffer:
            yield window.GlobalWindows.windowed_value(self._flush())

    def _flush(self) -> pa.RecordBatch:
        batch = self._builder.build(self._buffer, self._split)
        self._buffer, self._bytes = [], 0
        return batch


def serialize_record_batch(transformed: tuple[pa.RecordBatch, Any]
                           ) -> Iterator[KeyedExample]:
    """One ``KeyedExample`` per row of a ``TransformDataset`` output record batch.

    The split comes from the passthrough ``SPLIT_COLUMN``, which is not encoded.
    tfx_bsl's C++ encoder writes each tf.Example's features in no fixed order;
    re-serializing with ``deterministic=True`` sorts them by name, which makes the
    bytes identical to ``serialize_example`` of the same instance.
    """
    import tensorflow as tf
    from tfx_bsl.coders.example_coder import RecordBatchToExamplesEncoder

    record_batch, _ = transformed
    keys = record_batch.column(record_batch.schema.get_field_index(contract.SOURCE_KEY))
    splits = record_batch.column(record_batch.schema.get_field_index(SPLIT_COLUMN))
    features = record_batch.drop_columns([SPLIT_COLUMN])
    example = tf.train.Example()
    for key, split, serialized in zip(keys.to_pylist(), splits.to_pylist(),
                                      RecordBatchToExamplesEncoder().encode(features),
                                      strict=True):
        example.ParseFromString(serialized)
        key = key[0]
        yield KeyedExample(split[0].decode(),
                           key.decode("utf-8") if isinstance(key, bytes) else key,
                           example.SerializeToString(deterministic=True))


def _example_tfxio(raw_feature_spec: Mapping[str, Any]) -> Any:
    from tfx_bsl.tfxio import tf_example_record

    metadata = dataset_metadata.DatasetMetadata.from_feature_spec(dict(raw_feature_spec))
    return tf_example_record.TFExampleBeamRecord(
        physical_format="inmem", telemetry_descriptors=["etl"], schema=metadata.schema)


def analyze_input_columns(preprocessing_fn: Callable[[dict], dict],
                          raw_feature_spec: Mapping[str, Any]) -> list[str]:
    """The raw features ``preprocessing_fn``'s analyzers read (sorted), found by
    tracing it (``tft.get_analyze_input_columns``)."""
    import tensorflow_transform as tft

    type_specs = _example_tfxio(raw_feature_spec).TensorAdapter().OriginalTypeSpecs()
    return sorted(tft.get_analyze_input_columns(preprocessing_fn, type_specs))


class _TransformStage(beam.PTransform):
    """What every tf.Transform stage is built from: the preprocessing, the raw spec,
    where the transform output goes and tf.Transform's scratch directory."""

    def __init__(self, preprocessing_fn: Callable[[dict], dict],
                 raw_feature_spec: Mapping[str, Any], output_dir: str,
                 temp_dir: str) -> None:
        super().__init__()
        self._preprocessing_fn = preprocessing_fn
        self._raw_feature_spec = dict(raw_feature_spec)
        self._output_dir = output_dir
        self._temp_dir = temp_dir


class AnalyzeAndWriteTransformFn(_TransformStage):
    """Fits ``preprocessing_fn``'s analyzers on instances holding only their input
    columns, and writes ``transform_fn/`` and ``transformed_metadata/``.

    The analysis reads only the columns its analyzers need
    (:attr:`analyze_columns`): the input PCollection's instance dicts hold just
    those, and tf.Transform traces ``preprocessing_fn`` with the full raw spec kept
    as the ``TensorAdapterConfig``'s ``original_type_specs``, the way TFX's
    Transform executor projects its input. So bulk columns that no analyzer reads
    (encoded images) never cross a stage boundary into the analysis.

    Output: the PCollection ``tft_beam.WriteTransformFn`` returns once the
    transform output is final under ``output_dir``.
    """

    def __init__(self, preprocessing_fn: Callable[[dict], dict],
                 raw_feature_spec: Mapping[str, Any], output_dir: str,
                 temp_dir: str) -> None:
        super().__init__(preprocessing_fn, raw_feature_spec, output_dir, temp_dir)
        self.analyze_columns = analyze_input_columns(preprocessing_fn, raw_feature_spec)

    def expand(self, instances: beam.PCollection) -> Any:
        from tfx_bsl.tfxio import tensor_adapter

        tfxio = _example_tfxio(self._raw_feature_spec)
        projected = tfxio.Project(self.analyze_columns)
        builder = RecordBatchBuilder(
            {name: self._raw_feature_spec[name] for name in self.analyze_columns},
            projected.ArrowSchema())
        config = tensor_adapter.TensorAdapterConfig(
            projected.ArrowSchema(), projected.TensorRepresentations(),
            original_type_specs=tfxio.TensorAdapter().OriginalTypeSpecs())
        with tft_beam.Context(temp_dir=self._temp_dir):
            max_rows = tft_beam.Context.get_desired_batch_size() or MAX_BATCH_ROWS
            batches = instances | "ToRecordBatches" >> beam.ParDo(
                _ToRecordBatches(builder, max_rows, MAX_BATCH_BYTES, split=None))
            transform_fn = (batches, config) | "AnalyzeTrain" >> tft_beam.AnalyzeDataset(
                self._preprocessing_fn)
            return transform_fn | "WriteTransformFn" >> tft_beam.WriteTransformFn(
                self._output_dir)


class AnalyzeAndTransform(_TransformStage):
    """Fits ``preprocessing_fn``'s analyzers on one dataset, applies it to every split.

    Input: a dict of PCollections of raw instance dicts (``raw_feature_spec``):
    ``"analyze"`` (what the analyzers see: the train split, or a train-only view of
    it) and one entry per split of ``contract.SPLITS``.

    Every split goes through one ``TransformDataset``, its rows tagged with their
    split in a passthrough column.

    Output: ``(examples, transform_written)``: a PCollection of ``KeyedExample`` for
    all splits, and the PCollection ``tft_beam.WriteTransformFn`` returns once
    ``transform_fn/`` and ``transformed_metadata/`` are final under ``output_dir``.
    """


    def expand(self, raw: dict[str, beam.PCollection]) -> tuple[beam.PCollection, Any]:
        from tfx_bsl.tfxio import tensor_adapter, tf_example_record

        metadata = dataset_metadata.DatasetMetadata.from_feature_spec(self._raw_feature_spec)
        tfxio = tf_example_record.TFExampleBeamRecord(
            physical_format="inmem", telemetry_descriptors=["etl"], schema=metadata.schema)
        builder = RecordBatchBuilder(self._raw_feature_spec, tfxio.ArrowSchema(),
                                     split_column=SPLIT_COLUMN)
        tensor_adapter_config = tensor_adapter.TensorAdapterConfig(
            builder.schema, tfxio.TensorRepresentations())
        with tft_beam.Context(temp_dir=self._temp_dir, passthrough_keys={SPLIT_COLUMN}):
            # A batch size set on an enclosing tft_beam.Context caps the row count.
            max_rows = tft_beam.Context.get_desired_batch_size() or MAX_BATCH_ROWS
            batched: dict[int, beam.PCollection] = {}

            def batches(name: str) -> beam.PCollection:
                # The analyze input is often the train PCollection itself: batch it
                # once (tagged "train"; the analyzers never see the split column).
                pcoll = raw[name]
                if id(pcoll) not in batched:
                    batched[id(pcoll)] = pcoll | f"ToRecordBatches[{name}]" >> beam.ParDo(
                        _ToRecordBatches(builder, max_rows, MAX_BATCH_BYTES, split=name))
                return batched[id(pcoll)]

            split_batches = [batches(split) for split in contract.SPLITS]
            transform_fn = (
                (batches(ANALYZE), tensor_adapter_config)
                | "AnalyzeTrain" >> tft_beam.AnalyzeDataset(self._preprocessing_fn))
            transform_written = transform_fn | "WriteTransformFn" >> (
                tft_beam.WriteTransformFn(self._output_dir))
            all_splits = split_batches | "FlattenSplits" >> beam.Flatten()
            transformed, _ = (
                ((all_splits, tensor_adapter_config), transform_fn)
                | "Transform" >> tft_beam.TransformDataset(output_record_batches=True))
            examples = transformed | "Serialize" >> beam.FlatMap(serialize_record_batch)
        return examples, transform_written
