"""tf.Transform's analysis, shared by the jobs: fit on train, write ``transform_fn``.

Both jobs fit their analyzers here on small instances (the image job's train labels;
the time-series job's per-series train moments) and then apply the exported
``transform_fn`` themselves inside their fused shard steps, so the bulk data never
enters tf.Transform's own pipeline. Data path:

* Raw instance dicts are gathered into Arrow ``RecordBatch``es of tf.Transform's
  TFXIO in-memory tf.Example format (``_ToRecordBatches``). Handing tf.Transform
  instance dicts instead makes it encode every instance as a ``tf.train.Example``
  and decode the batch again, with extra Beam steps.
* Batches are bounded by row count *and* bytes.
* Only the columns the analyzers read are fed (``AnalyzeAndWriteTransformFn``).

tf.Transform writes through TensorFlow's own filesystem, which reaches Google's GCS
endpoint only (no emulator, no other object store Beam knows). So the transform
output is written under the tf.Transform temp dir (``--tft_temp_dir``: local disk in
a local run, a bucket on Dataflow), loaded from there by the shard steps and the
manifest step, and copied into the output directory through ``etl.core.io.storage``
(``PublishTransformOutput``); an ``--append`` stages the dataset's copy there the
other way (``stage_transform_output``).
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

from etl.core import singletons
from etl.core.io import storage
from reader.format import contract

# The transform output's folders, as the output directory and its staging copy hold them.
TRANSFORM_OUTPUT_DIRNAMES = (contract.TRANSFORM_FN_DIRNAME,
                             contract.TRANSFORMED_METADATA_DIRNAME,
                             contract.RAW_METADATA_DIRNAME)
# Where, under the tf.Transform temp dir, TensorFlow writes and reads it.
STAGING_DIRNAME = "transform_output"

# Bounds of one batch fed to the analysis: rows (tfx_bsl's own cap is 1000) and raw
# bytes. The analyzers' results never depend on batching (exact sums, counts).
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
    its values flattened row-major (a ``VarLenFeature``: its list of values): exactly
    the batch tf.Transform builds itself from instance dicts (``ExampleProtoCoder``
    then tfx_bsl's tf.Example decoder), without the round trip through serialized
    tf.Examples.
    """

    def __init__(self, feature_spec: Mapping[str, Any], arrow_schema: pa.Schema) -> None:
        self._feature_names = list(arrow_schema.names)
        self._schema = arrow_schema
        # Values per instance; None for a variable-length feature.
        self._sizes = {name: (int(np.prod(feature_spec[name].shape, dtype=np.int64))
                              if hasattr(feature_spec[name], "shape") else None)
                       for name in self._feature_names}

    @property
    def schema(self) -> pa.Schema:
        """The schema of the batches built."""
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
            if size is not None and count != size:
                raise ValueError(f"Feature {name!r} must have {size} value(s) per "
                                 f"instance, got {count}.")
        offsets = pa.array(np.concatenate([[0], np.cumsum(counts, dtype=np.int64)]))
        return pa.LargeListArray.from_arrays(offsets, flat, type=list_type)

    def build(self, instances: Sequence[Mapping[str, Any]]) -> pa.RecordBatch:
        columns = [self._column(name, [instance[name] for instance in instances])
                   for name in self._feature_names]
        return pa.RecordBatch.from_arrays(columns, schema=self._schema)


class _ToRecordBatches(beam.DoFn):
    """Gathers instance dicts into record batches of bounded rows and bytes."""

    def __init__(self, builder: RecordBatchBuilder, max_rows: int, max_bytes: int) -> None:
        self._builder = builder
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
        batch = self._builder.build(self._buffer)
        self._buffer, self._bytes = [], 0
        return batch


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


def staging_dir(temp_dir: str) -> str:
    """Where the transform output is written and loaded, under the tf.Transform temp
    dir ``temp_dir``."""
    return storage.join(temp_dir, STAGING_DIRNAME)


def _copy_transform_output(source: str, destination: str) -> None:
    for name in TRANSFORM_OUTPUT_DIRNAMES:
        storage.delete_tree(storage.join(destination, name))
        if not storage.copy_tree(storage.join(source, name), storage.join(destination, name)):
            raise FileNotFoundError(f"No {name}/ under {source!r} to copy.")


def publish_transform_output(staged: str, output_dir: str, written: Any) -> str:
    """Copies the transform output written under ``staged`` into ``output_dir``;
    returns ``staged``, where TensorFlow loads it from."""
    del written  # Only ordering: the staged output is complete.
    _copy_transform_output(staged, output_dir)
    return staged


def stage_transform_output(unused: Any, output_dir: str, staged: str) -> str:
    """Copies a published dataset's transform output to ``staged`` for TensorFlow to
    load (an ``--append``); returns ``staged``."""
    del unused
    _copy_transform_output(output_dir, staged)
    return staged


def write_transform_output(transform_fn: Any, serving_feature_spec: Mapping[str, Any],
                           output_dir: str, staged: str) -> beam.PCollection:
    """Writes ``transform_fn/`` and ``transformed_metadata/`` (``WriteTransformFn``) and
    the schema of ``serving_feature_spec`` (the raw features serving feeds) in
    ``metadata/``, which ``tft.TFTransformOutput``'s ``raw_feature_spec()`` reads when
    serving code builds its parse spec the TFX way: under ``staged``, by TensorFlow,
    then into ``output_dir``, by ``etl.core.io.storage``.

    Returns:
        A single-element PCollection holding ``staged`` once all three are in
        ``output_dir`` too (callers wait on it as a side input and load from it).
    """
    pipeline = transform_fn[0].pipeline
    written = transform_fn | "WriteTransformFn" >> tft_beam.WriteTransformFn(staged)
    raw_written = (
        dataset_metadata.DatasetMetadata.from_feature_spec(dict(serving_feature_spec))
        | "WriteRawMetadata" >> tft_beam.WriteMetadata(
            storage.join(staged, contract.RAW_METADATA_DIRNAME), pipeline))
    done = (written, raw_written) | "TransformOutputWritten" >> beam.Flatten()
    return pipeline | "PublishTransformOutput" >> singletons.Once(
        publish_transform_output, staged=staged, output_dir=output_dir,
        written=beam.pvalue.AsList(done))


class AnalyzeAndWriteTransformFn(beam.PTransform):
    """Fits ``preprocessing_fn``'s analyzers on instances holding only their input
    columns, and writes ``transform_fn/`` and ``transformed_metadata/``.

    The analysis reads only the columns its analyzers need
    (:attr:`analyze_columns`): the input PCollection's instance dicts hold just
    those, and tf.Transform traces ``preprocessing_fn`` with the full raw spec kept
    as the ``TensorAdapterConfig``'s ``original_type_specs``, the way TFX's
    Transform executor projects its input. So bulk columns that no analyzer reads
    (encoded images) never cross a stage boundary into the analysis.

    ``serving_feature_spec`` (default: ``raw_feature_spec``) is the raw schema written
    to ``metadata/``: what serving feeds ``transform_fn``, without analysis-only
    features.

    Output: a single-element PCollection, the folder TensorFlow loads the transform
    output from (under ``temp_dir``), once it is final there and in ``output_dir``.
    """

    def __init__(self, preprocessing_fn: Callable[[dict], dict],
                 raw_feature_spec: Mapping[str, Any], output_dir: str,
                 temp_dir: str, serving_feature_spec: Mapping[str, Any] | None = None
                 ) -> None:
        super().__init__()
        self._preprocessing_fn = preprocessing_fn
        self._raw_feature_spec = dict(raw_feature_spec)
        self._output_dir = output_dir
        self._temp_dir = temp_dir
        self.analyze_columns = analyze_input_columns(preprocessing_fn, raw_feature_spec)
        self._serving_feature_spec = dict(serving_feature_spec or raw_feature_spec)

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
                _ToRecordBatches(builder, max_rows, MAX_BATCH_BYTES))
            transform_fn = (batches, config) | "AnalyzeTrain" >> tft_beam.AnalyzeDataset(
                self._preprocessing_fn)
            return write_transform_output(transform_fn, self._serving_feature_spec,
                                          self._output_dir, staging_dir(self._temp_dir))
