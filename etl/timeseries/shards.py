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

from collections.abc import Iterable, Iterator

import numpy as np
from apache_beam.utils import shared

from etl.core import dead_letters
from etl.core.dead_letters import Rejection
from etl.core.shards import placement
from etl.core.shards.files import ShardFormat
from etl.core.shards.step import ShardBlock, ShardStep, load_transform_fn
from etl.timeseries import preprocessing as ts_preprocessing
from etl.timeseries.runs import WindowRun, read_run
from etl.timeseries.series import Windowing, window_steps
from reader.format import contract


class SeriesTransform:
    """The exported ``transform_fn`` applied to batches of raw windows, eagerly.

    Loaded from ``<output_dir>/transform_fn`` (``load_transform_fn``), pruned to
    the outputs stored as floats or ids and the inputs they depend on
    (the string features are copied as given); thread-safe, one instance per
    process (``shared.Shared``).
    """

    def __init__(self, transform_fn_dir: str, config: ts_preprocessing.SeriesPreprocessing
                 ) -> None:
        self._config = config
        blocks = list(config.raw_shapes())
        if config.classification:
            self.output_keys = [contract.WINDOW_KEY, contract.LABEL_KEY]
            self.input_keys = [*blocks, contract.LABEL_NAME_KEY]
        else:
            schema = config.window_schema()
            self.output_keys = [*(key for key, _ in schema.blocks + schema.id_blocks),
                                contract.WINDOW_KEY, contract.TARGET_KEY]
            self.input_keys = blocks
        self.input_keys = sorted([*self.input_keys, contract.SERIES_ID_KEY])
        self._apply = load_transform_fn(transform_fn_dir, self.input_keys, self.output_keys)

    def __call__(self, raw: dict[str, np.ndarray], series_ids: list[bytes],
                 labels: list[bytes] | None) -> dict[str, np.ndarray]:
        """``raw``: the raw blocks (``SeriesPreprocessing.raw_shapes``) of a batch."""
        import tensorflow as tf

        inputs = {key: tf.constant(value, ts_preprocessing.raw_dtype(key))
                  for key, value in raw.items()}
        inputs[contract.SERIES_ID_KEY] = tf.constant(series_ids, tf.string)
        if self._config.classification:
            inputs[contract.LABEL_NAME_KEY] = tf.constant(labels, tf.string)
        return self._apply(inputs)


# Windows per transform_fn call: few calls (each has a fixed cost), bounded memory.
TRANSFORM_WINDOWS = 8192


def _finite_rows(array: np.ndarray) -> np.ndarray:
    return np.isfinite(array.reshape(len(array), -1)).all(axis=1)


class TransformAndWriteWindowShard(ShardStep):
    """``((split, shard), [WindowRun])`` → the shard's pending file; emits its
    ``ShardResult`` (with label counts) and tagged ``Rejection``s."""

    WRITTEN_COUNTER = "windows_written"

    def __init__(self, output_dir: str, name: str, shard_format: ShardFormat,
                 config: ts_preprocessing.SeriesPreprocessing, windowing: Windowing,
                 transform_handle: shared.Shared) -> None:
        super().__init__(output_dir, name, shard_format, transform_handle)
        self._config = config
        self._windowing = windowing
        self._schema = config.window_schema()

    def load_transform(self, transform_fn_dir: str) -> SeriesTransform:
        return SeriesTransform(transform_fn_dir, self._config)

    def transform_blocks(self, units: Iterable[WindowRun], transform: SeriesTransform
                         ) -> Iterator[ShardBlock]:
        # Windows are cut, normalised and serialized in shard order, a block at a time.
        shard_windows = _ShardWindows(sorted(units, key=lambda r: r.key),
                                      self._config, self._windowing)
        order = shard_windows.order
        for first in range(0, len(order), TRANSFORM_WINDOWS):
            yield self._block(shard_windows, order[first:first + TRANSFORM_WINDOWS],
                              transform)

    def _block(self, windows: _ShardWindows, block: np.ndarray,
               transform: SeriesTransform) -> ShardBlock:
        """The examples of the windows ``block`` (indices, in shard order); windows
        whose normalised values overflow are rejected."""
        classification = self._config.classification
        runs = [windows.runs[r] for r in windows.run_of[block].tolist()]
        series = [run.series_id for run in runs]
        starts = [windows.starts[i] for i in block.tolist()]
        run_labels = [run.label or "" for run in runs]
        outputs = transform(windows.cut(block), [s.encode() for s in series],
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
        for name, _ in self._schema.blocks:
            finite &= _finite_rows(outputs[name])
        keep = np.flatnonzero(finite).tolist()
        rejections = [Rejection(
            key=f"{series[i]}@{starts[i]}", source=runs[i].source,
            reason=dead_letters.WINDOW_OUT_OF_RANGE,
            message="The normalised window or target does not fit float32: a value "
                    "lies too far outside the train statistics (mean, std) for them.")
            for i in np.flatnonzero(~finite).tolist()]
        labels = [run_labels[i] for i in keep] if classification else []
        examples = self._schema.encode(
            [series[i] for i in keep], [starts[i] for i in keep], normalised[keep],
            None if target is None else target[keep], labels if classification else None,
            None if label_ids is None else label_ids[keep].tolist(),
            {name: outputs[name][keep]
             for name, _ in self._schema.blocks + self._schema.id_blocks})
        return ShardBlock(examples, labels, rejections)


class _ShardWindows:
    """Every window of a shard's runs: their rows (read back from the spill), each
    window's start row, run and start text, and the shard order of the windows."""

    def __init__(self, runs: list[WindowRun],
                 config: ts_preprocessing.SeriesPreprocessing, windowing: Windowing) -> None:
        self.runs = runs
        self._windowing = windowing
        self._config = config
        num_features = config.num_features
        with_times = contract.RAW_TIME_KEY in config.raw_shapes()
        num_categoricals = len(config.roles.categoricals) if config.covariates else 0
        parts, start_rows, run_of, times, codes = [], [], [], [], []
        self.starts: list[str] = []
        categories: list[bytes] = []  # every run's category texts, one after another
        offset = 0
        for index, run in enumerate(runs):
            values, starts, run_times, run_codes, run_categories = read_run(
                run, num_features, with_times, num_categoricals)
            parts.append(values)
            times.append(run_times)
            if num_categoricals:
                codes.append(run_codes.astype(np.int64) + len(categories))
                categories += [text.encode() for text in run_categories]
            start_rows.append(offset + np.arange(run.num_windows, dtype=np.int64)
                              * windowing.shift)
            run_of.append(np.full(run.num_windows, index, np.int64))
            self.starts += starts
            offset += len(values)
        self._values = (np.concatenate(parts) if parts
                        else np.zeros((0, num_features), np.float32))
        self._times = (np.concatenate(times) if with_times and times
                       else np.zeros(0, np.int64))
        self._codes = (np.concatenate(codes) if codes
                       else np.zeros((0, num_categoricals), np.int64))
        self._categories = np.array(categories, dtype=object)
        self._start_rows = np.concatenate(start_rows) if start_rows else np.zeros(0, np.int64)
        self.run_of = np.concatenate(run_of) if run_of else np.zeros(0, np.int64)
        sort_keys = [placement.shard_sort_key(f"{runs[r].series_id}@{start}")
                     for r, start in zip(self.run_of.tolist(), self.starts, strict=True)]
        self.order = np.array(sorted(range(len(sort_keys)), key=sort_keys.__getitem__),
                              np.int64)

    def cut(self, block: np.ndarray) -> dict[str, np.ndarray]:
        """The raw blocks of windows ``block`` (``SeriesPreprocessing.raw_shapes``):
        ``window`` ``[n, W, F]`` and ``target`` ``[n, H, F]``, or by column role.

        Each window's rows are taken with one gather (``series.window_steps``)."""
        first = self._start_rows[block]
        windowing, config = self._windowing, self._config
        size = windowing.window_size
        steps = window_steps(self._values, first, windowing)  # [n, W + H, F]
        window, target = steps[:, :size], steps[:, size:]
        if not config.covariates:
            return ({contract.WINDOW_KEY: window} if config.classification
                    else {contract.WINDOW_KEY: window, contract.TARGET_KEY: target})
        roles = config.roles
        raw = {contract.WINDOW_KEY: window[..., :roles.num_window_columns],
               contract.TARGET_KEY: target[..., :len(roles.targets)]}
        if roles.known:
            raw[contract.KNOWN_KEY] = steps[..., roles.known_slice]
        if roles.calendar:
            times = window_steps(self._times[:, None], first, windowing)
            raw[contract.RAW_TIME_KEY] = times[..., 0]
        if roles.static_real:
            raw[contract.STATIC_REAL_KEY] = self._values[first][:, roles.static_slice]
        # The categoricals' texts, from each run's codes.
        num_known = len(roles.known_categorical)
        if roles.known_categorical:
            codes = window_steps(self._codes, first, windowing)
            raw[contract.KNOWN_CAT_KEY] = self._categories[codes[..., :num_known]]
        if roles.static_categorical:
            raw[contract.STATIC_CAT_KEY] = self._categories[
                self._codes[first][:, num_known:]]
        return raw
