"""The time-series job's fused step: a shard's window runs → windows → transform_fn → file.

Only small ``WindowRun`` records are grouped by shard. Inside this step the runs'
rows are read back from the spill (the shard's input: about ``shift / window_size``
of its windows' size), the windows are put in shard order (their keys' order hash)
and then, block by block, cut, normalised by the exported ``transform_fn`` itself
(so the stored values are ``transform_fn(raw window)`` by construction, as at
serving time), serialized and written. A window whose normalised values overflow
float32 is a dead letter, never an inf on disk.
"""

from __future__ import annotations

import collections
import concurrent.futures
import posixpath
from collections.abc import Iterable, Iterator
from typing import Any

import apache_beam as beam
import numpy as np
from apache_beam.utils import shared

from etl.core import dead_letters, sharding
from etl.core.dead_letters import Rejection
from etl.timeseries import preprocessing as ts_preprocessing
from etl.timeseries.runs import WindowRun, read_run
from etl.timeseries.series import Windowing, window_rows
from etl.timeseries.window_examples import WindowSchema
from reader import contract


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
        self._write_pool = concurrent.futures.ThreadPoolExecutor(
            1, thread_name_prefix="WindowShardWriter")

    def teardown(self) -> None:
        self._write_pool.shutdown()

    def process(self, element: tuple[tuple[str, int], Iterable[WindowRun]],
                num_shards: dict[str, int], transform_written: list[Any]) -> Iterator[Any]:
        del num_shards, transform_written  # Only ordering: the transform_fn is final.
        (split, shard), units = element
        transform_dir = posixpath.join(self._output_dir, contract.TRANSFORM_FN_DIRNAME)
        transform = self._transform_handle.acquire(
            lambda: SeriesTransform(transform_dir, self._config), tag=transform_dir)
        shard_windows = _ShardWindows(sorted(units, key=lambda r: r.key),
                                      self._config.num_features, self._windowing)
        rejections: list[Rejection] = []
        labels: collections.Counter[str] = collections.Counter()
        relpath = sharding.pending_relpath(self._name, split, shard)
        with sharding.ShardWriter(posixpath.join(self._output_dir, relpath),
                                  self._gzip_level) as writer:
            # Windows are cut, normalised and serialized in shard order, a block at a
            # time, each written while the next is prepared.
            order = shard_windows.order
            with sharding.BlockWriter(writer, self._write_pool) as blocks:
                for first in range(0, len(order), TRANSFORM_WINDOWS):
                    block = order[first:first + TRANSFORM_WINDOWS]
                    blocks.write(self._block_examples(shard_windows, block, transform,
                                                      rejections, labels))
        self._written.inc(writer.num_records)
        for rejection in rejections:
            yield from dead_letters.route(rejection)
        yield sharding.shard_result(split, shard, relpath, writer,
                                    label_counts=sorted(labels.items()))

    def _block_examples(self, windows: _ShardWindows, block: np.ndarray,
                        transform: SeriesTransform, rejections: list[Rejection],
                        labels: collections.Counter[str]) -> list[bytes]:
        """Serialized examples of the windows ``block`` (indices, in shard order);
        windows whose normalised values overflow go to ``rejections``."""
        classification = self._config.classification
        runs = [windows.runs[r] for r in windows.run_of[block].tolist()]
        series = [run.series_id for run in runs]
        starts = [windows.starts[i] for i in block.tolist()]
        run_labels = [run.label or "" for run in runs]
        raw_windows, raw_targets = windows.cut(block)
        outputs = transform(raw_windows, raw_targets, [s.encode() for s in series],
                            [label.encode() for label in run_labels] if classification
                            else None)
        normalised = outputs[contract.WINDOW_KEY]
        finite = _finite_rows(normalised)
        target = None
        label_ids = None
        if classification:
            label_ids = outputs[contract.LABEL_KEY]
        else:
            target = outputs[contract.TARGET_KEY]
            finite &= _finite_rows(target)
        keep = np.flatnonzero(finite).tolist()
        for i in np.flatnonzero(~finite).tolist():
            rejections.append(Rejection(
                key=f"{series[i]}@{starts[i]}", source=runs[i].source,
                reason=dead_letters.WINDOW_OUT_OF_RANGE,
                message="The normalised window or target does not fit float32: a value "
                        "lies too far outside the train statistics (mean, std) for them."))
        if classification:
            labels.update(run_labels[i] for i in keep)
        return self._schema.encode(
            [series[i] for i in keep], [starts[i] for i in keep], normalised[keep],
            None if target is None else target[keep],
            [run_labels[i] for i in keep] if classification else None,
            None if label_ids is None else label_ids[keep].tolist())


class _ShardWindows:
    """Every window of a shard's runs: their rows (read back from the spill), each
    window's start row, run and start text, and the shard order of the windows."""

    def __init__(self, runs: list[WindowRun], num_features: int, windowing: Windowing
                 ) -> None:
        self.runs = runs
        self._windowing = windowing
        parts, start_rows, run_of = [], [], []
        self.starts: list[str] = []
        offset = 0
        for index, run in enumerate(runs):
            values, starts = read_run(run, num_features)
            parts.append(values)
            start_rows.append(offset + np.arange(run.num_windows, dtype=np.int64)
                              * windowing.shift)
            run_of.append(np.full(run.num_windows, index, np.int64))
            self.starts += starts
            offset += len(values)
        self._values = (np.concatenate(parts) if parts
                        else np.zeros((0, num_features), np.float32))
        self._start_rows = np.concatenate(start_rows) if start_rows else np.zeros(0, np.int64)
        self.run_of = np.concatenate(run_of) if run_of else np.zeros(0, np.int64)
        sort_keys = [sharding.shard_sort_key(f"{runs[r].series_id}@{start}")
                     for r, start in zip(self.run_of.tolist(), self.starts, strict=True)]
        self.order = np.array(sorted(range(len(sort_keys)), key=sort_keys.__getitem__),
                              np.int64)
        window_offsets, target_offsets = window_rows(1, windowing)
        self._window_offsets, self._target_offsets = window_offsets[0], target_offsets[0]

    def cut(self, block: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Raw windows ``[n, W, F]`` and targets ``[n, H, F]`` of windows ``block``."""
        first = self._start_rows[block][:, None]
        return (self._values[first + self._window_offsets],
                self._values[first + self._target_offsets])
