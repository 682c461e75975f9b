"""The time-series job's fused step: a shard's window runs → windows → transform_fn → file.

Only small ``WindowRun`` records are grouped by shard; each run's rows are read
back from the spill, cut into overlapping windows, normalised by the exported
``transform_fn`` itself (so the stored values are ``transform_fn(raw window)`` by
construction, as at serving time) and serialized, all inside this step. The
shard's examples are then ordered by their key's order hash and written. A window
whose normalised values overflow float32 is a dead letter, never an inf on disk.
"""

from __future__ import annotations

import collections
import posixpath
from collections.abc import Iterable, Iterator
from typing import Any

import apache_beam as beam
import numpy as np
from apache_beam.utils import shared

from etl import contract, dead_letters, sharding
from etl import timeseries_preprocessing as ts_preprocessing
from etl.dead_letters import Rejection
from etl.timeseries_runs import WindowRun, read_run
from etl.timeseries_series import Windowing, window_arrays
from etl.window_examples import WindowSchema


class SeriesTransform:
    """The exported ``transform_fn`` applied to batches of raw windows, eagerly.

    Loaded from ``<output_dir>/transform_fn`` with tf.Transform's own loader and
    pruned to the outputs stored as floats or ids and the inputs they depend on
    (the string features are copied as given); thread-safe, one instance per
    process (``shared.Shared``).
    """

    def __init__(self, transform_fn_dir: str, config: ts_preprocessing.SeriesPreprocessing
                 ) -> None:
        from tensorflow_transform.saved import saved_transform_io_v2

        self._config = config
        self.output_keys = [contract.WINDOW_KEY, contract.LABEL_KEY if config.classification
                            else contract.TARGET_KEY]
        self.input_keys = sorted([contract.WINDOW_KEY, contract.SERIES_ID_KEY,
                                  contract.LABEL_NAME_KEY if config.classification
                                  else contract.TARGET_KEY])
        loader = saved_transform_io_v2.SavedModelLoader(transform_fn_dir)
        loader.finalize(self.input_keys, self.output_keys)
        self._apply = loader.apply_transform_model

    def __call__(self, windows: np.ndarray, targets: np.ndarray, series_ids: list[bytes],
                 labels: list[bytes] | None) -> dict[str, np.ndarray]:
        import tensorflow as tf

        inputs = {contract.WINDOW_KEY: tf.constant(windows, tf.float32),
                  contract.SERIES_ID_KEY: tf.constant(series_ids, tf.string)}
        if self._config.classification:
            inputs[contract.LABEL_NAME_KEY] = tf.constant(labels, tf.string)
        else:
            inputs[contract.TARGET_KEY] = tf.constant(targets, tf.float32)
        outputs = self._apply(inputs)
        return {name: outputs[name].numpy() for name in self.output_keys}


# Windows per transform_fn call: few calls (each has a fixed cost), bounded memory.
TRANSFORM_WINDOWS = 8192


def _finite_rows(array: np.ndarray) -> np.ndarray:
    return np.isfinite(array.reshape(len(array), -1)).all(axis=1)


class TransformAndWriteWindowShard(beam.DoFn):
    """``((split, shard), [WindowRun])`` → the shard's pending file; emits its shard
    result (small dict, with label counts) and tagged ``Rejection``s."""

    def __init__(self, output_dir: str, name: str, gzip_level: int,
                 config: ts_preprocessing.SeriesPreprocessing, windowing: Windowing,
                 transform_handle: shared.Shared) -> None:
        self._output_dir = output_dir
        self._name = name
        self._gzip_level = gzip_level
        self._config = config
        self._windowing = windowing
        self._schema = WindowSchema(config.window_size, config.horizon, config.num_features,
                                    config.classification)
        self._transform_handle = transform_handle

    def setup(self) -> None:
        self._written = beam.metrics.Metrics.counter(dead_letters.METRICS_NAMESPACE,
                                                     "windows_written")

    def process(self, element: tuple[tuple[str, int], Iterable[WindowRun]],
                num_shards: dict[str, int], transform_written: list[Any]) -> Iterator[Any]:
        del num_shards, transform_written  # Only ordering: the transform_fn is final.
        (split, shard), runs = element
        transform_dir = posixpath.join(self._output_dir, contract.TRANSFORM_FN_DIRNAME)
        transform = self._transform_handle.acquire(
            lambda: SeriesTransform(transform_dir, self._config), tag=transform_dir)
        records: list[tuple[tuple[int, str], bytes]] = []
        rejections: list[Rejection] = []
        labels: collections.Counter[str] = collections.Counter()
        batch: list[tuple[WindowRun, list[str], np.ndarray, np.ndarray]] = []
        batch_windows = 0
        for run in sorted(runs, key=lambda r: r.key):
            values, starts = read_run(run, self._config.num_features)
            _, windows, targets = window_arrays(values, self._windowing, run.num_windows)
            batch.append((run, starts, windows, targets))
            batch_windows += len(starts)
            if batch_windows >= TRANSFORM_WINDOWS:
                self._add_batch(batch, transform, records, rejections, labels)
                batch, batch_windows = [], 0
        if batch:
            self._add_batch(batch, transform, records, rejections, labels)
        records.sort(key=lambda record: record[0])
        relpath = sharding.pending_relpath(self._name, split, shard)
        with sharding.ShardWriter(posixpath.join(self._output_dir, relpath),
                                  self._gzip_level) as writer:
            for _, serialized in records:
                writer.write(serialized)
        self._written.inc(writer.num_records)
        for rejection in rejections:
            yield from dead_letters.route(rejection)
        yield sharding.shard_result(split, shard, relpath, writer,
                                    label_counts=sorted(labels.items()))

    def _add_batch(self, batch: list[tuple[WindowRun, list[str], np.ndarray, np.ndarray]],
                   transform: SeriesTransform, records: list[tuple[tuple[int, str], bytes]],
                   rejections: list[Rejection], labels: collections.Counter[str]) -> None:
        """Normalises the windows of several runs in one transform_fn call, then adds
        each run's examples (with their order keys) and rejected windows."""
        classification = self._config.classification
        runs = [run for run, _, _, _ in batch]
        counts = [len(starts) for _, starts, _, _ in batch]
        outputs = transform(
            np.concatenate([windows for _, _, windows, _ in batch]),
            np.concatenate([targets for _, _, _, targets in batch]),
            [run.series_id.encode() for run, count in zip(runs, counts, strict=True)
             for _ in range(count)],
            [run.label.encode() for run, count in zip(runs, counts, strict=True)
             for _ in range(count)] if classification else None)
        at = 0
        for (run, starts, _, _), count in zip(batch, counts, strict=True):
            normalised = outputs[contract.WINDOW_KEY][at:at + count]
            finite = _finite_rows(normalised)
            label_id = 0
            if classification:
                label_id = int(outputs[contract.LABEL_KEY][at])
                target = None
            else:
                target = outputs[contract.TARGET_KEY][at:at + count]
                finite &= _finite_rows(target)
                target = target[finite]
            at += count
            kept = [start for start, ok in zip(starts, finite.tolist(), strict=True) if ok]
            encoded = self._schema.encode(run.series_id, kept, normalised[finite], target,
                                          run.label, label_id)
            records += [(sharding.shard_sort_key(f"{run.series_id}@{start}"), data)
                        for start, data in zip(kept, encoded, strict=True)]
            rejections += [Rejection(
                key=f"{run.series_id}@{start}", source=run.source,
                reason=dead_letters.WINDOW_OUT_OF_RANGE,
                message="The normalised window or target does not fit float32: a value "
                        "lies too far outside the train statistics (mean, std) for them.")
                for start, ok in zip(starts, finite.tolist(), strict=True) if not ok]
            if run.label is not None:
                labels[run.label] += len(encoded)
