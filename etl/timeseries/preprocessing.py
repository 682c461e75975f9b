"""tf.Transform preprocessing for time-series windows: z-score normalisation, labels.

The analysis never sees a window. The series step sums every train row of a series
once, exactly (``etl/core/exact_stats.py``), and hands tf.Transform one small instance
per series with train rows: those moments (``TRAIN_MOMENTS_KEY``, serialized), the
series id and, with labels, the label and its number of train windows
(``TRAIN_WINDOWS_KEY``, the vocabulary's weight). The analyzers merge them into the
train mean and standard deviation, globally (``etl/core/zscore.py``) or per series.
The same graph then normalises every split's windows and targets in the shard step,
and, at serving time, raw windows (the analysis-only features are not needed there).
``DescribeNormalisation`` merges the same instances' moments beside the analysis into
the manifest's ``normalisation`` entry: the global statistics the graph applies.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import apache_beam as beam
import numpy as np
import tensorflow as tf
import tensorflow_transform as tft

from etl.core import exact_stats, zscore
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

    def serving_feature_spec(self) -> dict[str, tf.io.FixedLenFeature]:
        """Spec of a raw window: what the shard step and serving feed ``transform_fn``."""
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

    def raw_feature_spec(self) -> dict[str, tf.io.FixedLenFeature]:
        """The serving spec plus the analysis-only features."""
        spec = {**self.serving_feature_spec(),
                TRAIN_MOMENTS_KEY: tf.io.FixedLenFeature([], tf.string)}
        if self.classification:
            spec[TRAIN_WINDOWS_KEY] = tf.io.FixedLenFeature([], tf.int64)
        return spec


# Raw features only the analysis reads: one instance per series with train rows.
TRAIN_MOMENTS_KEY = "train_moments"
TRAIN_WINDOWS_KEY = "train_windows"


def analysis_instance(series_id: str, moments: exact_stats.Moments, label: str | None,
                      train_windows: int) -> dict[str, Any]:
    """The one instance the analysis sees for a series with train rows."""
    instance: dict[str, Any] = {TRAIN_MOMENTS_KEY: moments.to_bytes(),
                                contract.SERIES_ID_KEY: series_id}
    if label is not None:
        instance[contract.LABEL_NAME_KEY] = label
        instance[TRAIN_WINDOWS_KEY] = train_windows
    return instance


def _moments_by_key(batch: list[np.ndarray]
                    ) -> Iterator[tuple[bytes, exact_stats.Moments]]:
    moments, keys = batch
    for data, key in zip(moments, keys, strict=True):
        yield key, exact_stats.Moments.from_bytes(data)


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
    stats = [moments.mean_and_std() for _, moments in pairs]
    yield beam.pvalue.TaggedOutput("keys", np.array([k for k, _ in pairs], dtype=object))
    yield beam.pvalue.TaggedOutput("fingerprints", fingerprints.astype(np.int64))
    for index, tag in enumerate(("mean", "std")):
        values = [s[index] for s in stats]
        yield beam.pvalue.TaggedOutput(tag, np.stack(values) if values else np.zeros(
            (0, num_columns), np.float32))


@beam.ptransform_fn
def _ExactMeanAndStdPerKey(batches: beam.PCollection, num_columns: int
                           ) -> tuple[beam.PCollection, ...]:
    """Analyzer body: batches ``([serialized moments], [series ids])`` → keys ``[K]``
    and their fingerprints ``[K]`` (sorted by fingerprint), mean ``[K, F]``,
    std ``[K, F]``."""
    outputs = (
        batches
        | "MomentsByKey" >> beam.FlatMap(_moments_by_key)
        | "SumPerKey" >> beam.CombinePerKey(exact_stats.MomentsCombineFn(num_columns))
        | "Gather" >> beam.combiners.ToList()
        | "PerKeyStats" >> beam.FlatMap(_emit_per_key, num_columns=num_columns).with_outputs(
            "keys", "fingerprints", "mean", "std"))
    return outputs.keys, outputs.fingerprints, outputs.mean, outputs.std


def _per_series_stats(moments: tf.Tensor, series_ids: tf.Tensor, num_columns: int,
                      global_mean: tf.Tensor, global_std: tf.Tensor
                      ) -> tuple[tf.Tensor, tf.Tensor]:
    """``[batch, F]`` mean and std of each instance's series (train rows only);
    series never seen in train fall back to the global statistics."""
    keys, key_fingerprints, means, stds = tft.experimental.ptransform_analyzer(
        [moments, series_ids], _ExactMeanAndStdPerKey(num_columns),
        [tf.string, tf.int64, tf.float32, tf.float32],
        [[None], [None], [None, num_columns], [None, num_columns]],
        name="exact_mean_and_std_per_series")
    # Binary search of each id's fingerprint among the sorted train fingerprints, then
    # an exact string check; a miss (unseen series) takes index K, the appended row
    # of global statistics.
    num_keys = tf.size(keys, out_type=tf.int64)
    position = tf.searchsorted(key_fingerprints, fingerprint(series_ids), out_type=tf.int64)
    candidate = tf.gather(tf.concat([keys, [""]], axis=0), position)
    index = tf.where((position < num_keys) & tf.equal(candidate, series_ids),
                     position, num_keys)
    mean = tf.gather(tf.concat([means, global_mean[None, :]], axis=0), index)
    std = tf.gather(tf.concat([stds, global_std[None, :]], axis=0), index)
    return mean, std


def preprocessing_fn(inputs: dict[str, tf.Tensor], *, config: SeriesPreprocessing
                     ) -> dict[str, tf.Tensor]:
    """Normalises ``window`` (and the forecast ``target``) by train statistics.

    ``z = (x - mean) / std`` per value column (``std`` is the population standard
    deviation; a constant column gets ``std = 1``). With ``per_series`` the
    statistics are those of the instance's own series. They come from tf.Transform
    analyzers (``ptransform_analyzer``) over the per-series exact moments
    (``TRAIN_MOMENTS_KEY``), so they do not depend on how Beam batches the data.
    """
    moments = inputs[TRAIN_MOMENTS_KEY]
    mean, std = zscore.exact_mean_and_std(moments, config.num_features)
    window = inputs[contract.WINDOW_KEY]  # [batch, W, F]
    series_ids = inputs[contract.SERIES_ID_KEY]
    if config.per_series:
        mean, std = _per_series_stats(moments, series_ids, config.num_features, mean, std)
        mean, std = mean[:, None, :], std[:, None, :]
    outputs = {
        contract.WINDOW_KEY: zscore.normalise(window, mean, std),
        contract.SERIES_ID_KEY: tf.identity(series_ids),
        contract.WINDOW_START_KEY: tf.identity(inputs[contract.WINDOW_START_KEY]),
        contract.SOURCE_KEY: tf.identity(inputs[contract.SOURCE_KEY]),
    }
    if config.classification:
        labels = inputs[contract.LABEL_NAME_KEY]
        outputs[contract.LABEL_KEY] = tft.compute_and_apply_vocabulary(
            labels, vocab_filename=contract.LABEL_VOCABULARY_NAME,
            default_value=UNKNOWN_LABEL_ID,
            weights=tf.cast(inputs[TRAIN_WINDOWS_KEY], tf.float32),
            # A label whose series have train rows but no train window gets no id.
            frequency_threshold=1)
        outputs[contract.LABEL_NAME_KEY] = tf.identity(labels)
    else:
        outputs[contract.TARGET_KEY] = zscore.normalise(inputs[contract.TARGET_KEY], mean, std)
    return outputs


def _moments(instance: dict[str, Any]) -> exact_stats.Moments:
    return exact_stats.Moments.from_bytes(instance[TRAIN_MOMENTS_KEY])


def _normalisation_entry(summary: dict[str, list[float]]) -> dict[str, Any]:
    return {"normalisation": {"per_series": False, **summary}}


class DescribeNormalisation(beam.PTransform):
    """Analysis instances → the manifest's single ``{"normalisation": ...}`` entry.

    Global: ``{"per_series": False, "mean": [F], "std": [F]}``, the float32 values
    ``preprocessing_fn`` applies (``zscore.SummariseMoments`` over the instances'
    moments; ``std`` is the divisor: 1 for a constant column). Per series:
    ``{"per_series": True}``; the statistics live only in the transform_fn.
    """

    def __init__(self, config: SeriesPreprocessing) -> None:
        super().__init__()
        self._config = config

    def expand(self, instances: beam.PCollection) -> beam.PCollection:
        if self._config.per_series:
            return instances.pipeline | "PerSeries" >> beam.Create(
                [{"normalisation": {"per_series": True}}])
        return (instances
                | "TrainMoments" >> beam.Map(_moments)
                | "Summarise" >> zscore.SummariseMoments(self._config.num_features)
                | "NormalisationEntry" >> beam.Map(_normalisation_entry))
