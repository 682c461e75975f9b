"""Per-series train statistics inside tf.Transform (``--normalize=per_series``).

An analyzer (``ptransform_analyzer``) merges the per-series exact moments into each
train series' mean and standard deviation, sorted by a fingerprint of the series id;
the graph finds an instance's series by binary search and falls back to the global
statistics for a series without train rows.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import apache_beam as beam
import numpy as np
import tensorflow as tf
import tensorflow_transform as tft

from etl.core.transform import exact_stats


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


def per_series_stats(moments: tf.Tensor, series_ids: tf.Tensor, num_columns: int,
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
