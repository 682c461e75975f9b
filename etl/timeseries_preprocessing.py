"""tf.Transform preprocessing for time-series windows: z-score normalisation, labels.

The analyzers run on non-overlapping train tiles (every train row once), so the
normaliser's mean and standard deviation are per-row statistics of the train split
only; the same graph then normalises every split's windows and targets, and, at
serving time, raw windows.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import apache_beam as beam
import numpy as np
import tensorflow as tf
import tensorflow_transform as tft

from etl import exact_stats
from reader import contract
from reader.contract import UNKNOWN_LABEL_ID


@dataclasses.dataclass(frozen=True)
class SeriesPreprocessing:
    """What the transform needs to know about the windows."""

    window_size: int
    horizon: int
    num_features: int
    classification: bool
    per_series: bool = False

    def __post_init__(self) -> None:
        if self.classification and self.horizon:
            raise ValueError("With --labels the target is the series label: use "
                             "--horizon=0.")
        if not self.classification and self.horizon < 1:
            raise ValueError("Forecasting needs --horizon >= 1 (or give --labels to "
                             "classify whole series).")

    def raw_feature_spec(self) -> dict[str, tf.io.FixedLenFeature]:
        """Spec of the raw window instances fed to tf.Transform."""
        spec = {
            contract.WINDOW_KEY: tf.io.FixedLenFeature(
                [self.window_size, self.num_features], tf.float32),
            contract.SERIES_ID_KEY: tf.io.FixedLenFeature([], tf.string),
            contract.WINDOW_START_KEY: tf.io.FixedLenFeature([], tf.string),
            contract.SOURCE_KEY: tf.io.FixedLenFeature([], tf.string),
        }
        if self.classification:
            spec[contract.LABEL_NAME_KEY] = tf.io.FixedLenFeature([], tf.string)
        else:
            spec[contract.TARGET_KEY] = tf.io.FixedLenFeature(
                [self.horizon, self.num_features], tf.float32)
        return spec


def _emit_mean_and_variance(moments: exact_stats.Moments) -> Iterator[Any]:
    mean, variance = moments.mean_and_variance()
    yield beam.pvalue.TaggedOutput("mean", mean)
    yield beam.pvalue.TaggedOutput("variance", variance)


class _ExactMeanAndVariance(beam.PTransform):
    """Analyzer body: batches ``([rows, F],)`` → mean ``[F]``, variance ``[F]``."""

    def __init__(self, num_columns: int) -> None:
        super().__init__()
        self._num_columns = num_columns

    def expand(self, batches: beam.PCollection) -> tuple[beam.PCollection, ...]:
        outputs = (
            batches
            | "Moments" >> beam.Map(lambda batch: exact_stats.moments_of(batch[0]))
            | "Sum" >> beam.CombineGlobally(exact_stats.MomentsCombineFn(self._num_columns))
            | "MeanAndVariance" >> beam.FlatMap(_emit_mean_and_variance).with_outputs(
                "mean", "variance"))
        return outputs.mean, outputs.variance


def _moments_by_key(batch: tuple[np.ndarray, np.ndarray]
                    ) -> Iterator[tuple[bytes, exact_stats.Moments]]:
    rows, keys = batch
    for key in np.unique(keys):
        yield key, exact_stats.moments_of(rows[keys == key])


# Series ids are looked up by a 63-bit FarmHash fingerprint (binary search), so the
# transform needs O(batch) memory for any number of series.
_FINGERPRINT_BUCKETS = 2**63 - 1


def fingerprint(ids: Any) -> Any:
    """Fingerprints of string ids, the same in the analyzer and in the graph."""
    return tf.strings.to_hash_bucket_fast(ids, _FINGERPRINT_BUCKETS)


def _emit_per_key(pairs: list[tuple[bytes, exact_stats.Moments]], num_columns: int
                  ) -> Iterator[Any]:
    keys = [key for key, _ in pairs]
    fingerprints = (fingerprint(tf.constant(keys, tf.string)).numpy() if keys
                    else np.zeros([0], np.int64))
    order = sorted(range(len(pairs)), key=lambda i: (int(fingerprints[i]), keys[i]))
    fingerprints = fingerprints[order]
    clashes = np.flatnonzero(fingerprints[1:] == fingerprints[:-1])
    if clashes.size:
        clash = int(clashes[0])
        raise ValueError(
            f"Series ids {keys[order[clash]]!r} and {keys[order[clash + 1]]!r} have the "
            f"same 63-bit fingerprint; rename one of them to use --normalize=per_series.")
    pairs = [pairs[i] for i in order]
    stats = [moments.mean_and_variance() for _, moments in pairs]
    yield beam.pvalue.TaggedOutput("keys", np.array([k for k, _ in pairs], dtype=object))
    yield beam.pvalue.TaggedOutput("fingerprints", fingerprints.astype(np.int64))
    for index, tag in enumerate(("mean", "variance")):
        values = [s[index] for s in stats]
        yield beam.pvalue.TaggedOutput(tag, np.stack(values) if values else np.zeros(
            (0, num_columns), np.float32))


class _ExactMeanAndVariancePerKey(beam.PTransform):
    """Analyzer body: batches ``([rows, F], [rows] keys)`` → keys ``[K]`` and their
    fingerprints ``[K]`` (sorted by fingerprint), mean ``[K, F]``, variance ``[K, F]``."""

    def __init__(self, num_columns: int) -> None:
        super().__init__()
        self._num_columns = num_columns

    def expand(self, batches: beam.PCollection) -> tuple[beam.PCollection, ...]:
        outputs = (
            batches
            | "MomentsByKey" >> beam.FlatMap(_moments_by_key)
            | "SumPerKey" >> beam.CombinePerKey(exact_stats.MomentsCombineFn(
                self._num_columns))
            | "Gather" >> beam.combiners.ToList()
            | "PerKeyStats" >> beam.FlatMap(
                _emit_per_key, num_columns=self._num_columns).with_outputs(
                    "keys", "fingerprints", "mean", "variance"))
        return outputs.keys, outputs.fingerprints, outputs.mean, outputs.variance


def _global_stats(flat: tf.Tensor, num_columns: int) -> tuple[tf.Tensor, tf.Tensor]:
    mean, variance = tft.experimental.ptransform_analyzer(
        [flat], _ExactMeanAndVariance(num_columns), [tf.float32, tf.float32],
        [[num_columns], [num_columns]], name="exact_mean_and_variance")
    return mean, variance


def _per_series_stats(flat: tf.Tensor, series_ids: tf.Tensor, window_size: int,
                      num_columns: int, global_mean: tf.Tensor, global_var: tf.Tensor
                      ) -> tuple[tf.Tensor, tf.Tensor]:
    """``[batch, F]`` mean and variance of each instance's series (train rows only);
    series never seen in train fall back to the global statistics."""
    keys, key_fingerprints, means, variances = tft.experimental.ptransform_analyzer(
        [flat, tf.repeat(series_ids, window_size)],
        _ExactMeanAndVariancePerKey(num_columns),
        [tf.string, tf.int64, tf.float32, tf.float32],
        [[None], [None], [None, num_columns], [None, num_columns]],
        name="exact_mean_and_variance_per_series")
    # Binary search of each id's fingerprint among the sorted train fingerprints, then
    # an exact string check; a miss (unseen series) takes index K, the appended row
    # of global statistics.
    num_keys = tf.size(keys, out_type=tf.int64)
    position = tf.searchsorted(key_fingerprints, fingerprint(series_ids), out_type=tf.int64)
    candidate = tf.gather(tf.concat([keys, [""]], axis=0), position)
    index = tf.where((position < num_keys) & tf.equal(candidate, series_ids),
                     position, num_keys)
    mean = tf.gather(tf.concat([means, global_mean[None, :]], axis=0), index)
    var = tf.gather(tf.concat([variances, global_var[None, :]], axis=0), index)
    return mean, var


def preprocessing_fn(inputs: dict[str, tf.Tensor], *, config: SeriesPreprocessing
                     ) -> dict[str, tf.Tensor]:
    """Normalises ``window`` (and the forecast ``target``) by train statistics.

    ``z = (x - mean) / std`` per value column (``std`` is the population standard
    deviation; a constant column gets ``std = 1``). With ``per_series`` the
    statistics are those of the instance's own series. The statistics come from
    tf.Transform analyzers (``ptransform_analyzer``) that sum exactly
    (``etl/exact_stats.py``), so they do not depend on how Beam batches the data.
    """
    window = inputs[contract.WINDOW_KEY]  # [batch, W, F]
    flat = tf.reshape(window, [-1, config.num_features])
    mean, var = _global_stats(flat, config.num_features)
    if config.per_series:
        mean, var = _per_series_stats(flat, inputs[contract.SERIES_ID_KEY],
                                      config.window_size, config.num_features, mean, var)
        mean, var = mean[:, None, :], var[:, None, :]
    std = tf.sqrt(var)
    std = tf.where(std > 0, std, tf.ones_like(std))
    outputs = {
        contract.WINDOW_KEY: (window - mean) / std,
        contract.SERIES_ID_KEY: tf.identity(inputs[contract.SERIES_ID_KEY]),
        contract.WINDOW_START_KEY: tf.identity(inputs[contract.WINDOW_START_KEY]),
        contract.SOURCE_KEY: tf.identity(inputs[contract.SOURCE_KEY]),
    }
    if config.classification:
        labels = inputs[contract.LABEL_NAME_KEY]
        outputs[contract.LABEL_KEY] = tft.compute_and_apply_vocabulary(
            labels, vocab_filename=contract.LABEL_VOCABULARY_NAME,
            default_value=UNKNOWN_LABEL_ID)
        outputs[contract.LABEL_NAME_KEY] = tf.identity(labels)
    else:
        outputs[contract.TARGET_KEY] = (inputs[contract.TARGET_KEY] - mean) / std
    return outputs


def describe_normalisation(transform_output: Any, config: SeriesPreprocessing
                           ) -> dict[str, Any]:
    """The train mean/std per value column, read back from the written transform_fn.

    The transform is affine (``z = (x - m) / s``), so two probe windows (all zeros,
    all ones) give ``s = 1 / (z1 - z0)`` and ``m = -z0 * s``. Per-series statistics
    live only in the transform_fn.
    """
    if config.per_series:
        return {"normalisation": {"per_series": True}}
    probe = {}
    for name, spec in config.raw_feature_spec().items():
        if spec.dtype == tf.string:
            probe[name] = tf.constant([b"", b""])
        else:
            probe[name] = tf.stack([tf.zeros(spec.shape), tf.ones(spec.shape)])
    z = transform_output.transform_raw_features(probe)[contract.WINDOW_KEY].numpy()
    z0, z1 = z[0, 0].astype(np.float64), z[1, 0].astype(np.float64)
    std = 1.0 / (z1 - z0)
    return {"normalisation": {"per_series": False, "mean": (-z0 * std).tolist(),
                              "std": std.tolist()}}
