"""etl/core/transform/zscore.py: the exact-statistics analyzer, the std-0 rule, manifest numbers."""

from __future__ import annotations

import json

import apache_beam as beam
import numpy as np
import tensorflow as tf
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to

from etl.core.transform import exact_stats, zscore

# Never the plain DirectRunner: it first tries to download Prism, which stalls offline.
RUNNER = "apache_beam.runners.portability.fn_api_runner.FnApiRunner"


def columns() -> np.ndarray:
    """A varied column (mean and std not short decimals) and a constant one."""
    rng = np.random.default_rng(0)
    varied = rng.normal(247.8, 151.5, size=500)
    return np.stack([varied, np.full(500, 3.25)], axis=1).astype(np.float32)


def test_normalise_divides_by_one_where_std_is_zero():
    values = tf.constant([[1.0, 2.0], [5.0, 4.0]])
    z = zscore.normalise(values, tf.constant([1.0, 2.0]), tf.constant([2.0, 0.0]))
    np.testing.assert_array_equal(z.numpy(), [[0.0, 0.0], [2.0, 2.0]])


def test_applied_mean_and_std_replace_a_zero_std_by_one():
    moments = exact_stats.moments_of(columns())
    mean, std = moments.mean_and_std()
    applied_mean, applied_std = zscore.applied_mean_and_std(moments)
    assert std[1] == 0
    assert applied_mean == [float(mean[0]), 3.25]
    assert applied_std == [float(std[0]), 1.0]


def test_applied_mean_and_std_read_back_from_json_as_the_same_float32():
    moments = exact_stats.moments_of(columns())
    mean, std = moments.mean_and_std()
    read = json.loads(json.dumps(zscore.applied_mean_and_std(moments)))
    assert np.array_equal(np.float32(read[0]), mean)
    assert np.float32(read[1][0]) == std[0]
    assert all(type(v) is float for v in read[0] + read[1])


def test_summarise_moments_gives_the_applied_statistics_in_any_merge_order():
    x = columns()
    parts = [exact_stats.moments_of(p) for p in (x[300:], x[:7], x[7:300][::-1])]
    mean, std = zscore.applied_mean_and_std(exact_stats.moments_of(x))
    with TestPipeline(runner=RUNNER) as p:
        summary = (p | beam.Create(parts, reshuffle=False)
                   | zscore.SummariseMoments(num_columns=2))
        assert_that(summary, equal_to([{"mean": mean, "std": std}]))


def test_summarise_moments_of_nothing_is_mean_zero_std_one():
    with TestPipeline(runner=RUNNER) as p:
        summary = (p | beam.Create([], reshuffle=False)
                   | zscore.SummariseMoments(num_columns=2))
        assert_that(summary, equal_to([{"mean": [0.0, 0.0], "std": [1.0, 1.0]}]))


def test_exact_mean_and_std_analyzer_gives_what_summarise_moments_records(tmp_path):
    # The analyzer fit by tf.Transform on serialized moments, applied by normalise:
    # its constants are the recorded mean and divisor, bit for bit.
    import tensorflow_transform.beam as tft_beam
    from tensorflow_transform.tf_metadata import dataset_metadata, schema_utils

    x = columns()
    parts = [exact_stats.moments_of(p) for p in (x[:100], x[100:])]
    mean, std = zscore.applied_mean_and_std(exact_stats.merge_all(parts, 2))
    instances = [{"moments": m.to_bytes(), "value": x[0]} for m in parts]
    metadata = dataset_metadata.DatasetMetadata(schema_utils.schema_from_feature_spec({
        "moments": tf.io.FixedLenFeature([], tf.string),
        "value": tf.io.FixedLenFeature([2], tf.float32)}))

    def preprocessing_fn(inputs):
        fit_mean, fit_std = zscore.exact_mean_and_std(inputs["moments"], num_columns=2)
        return {"mean": tf.zeros_like(inputs["value"]) + fit_mean,
                "divisor": tf.zeros_like(inputs["value"]) + tf.where(fit_std > 0, fit_std, 1.0),
                "z": zscore.normalise(inputs["value"], fit_mean, fit_std)}

    with tft_beam.Context(temp_dir=str(tmp_path)):
        (transformed, _), _ = ((instances, metadata)
                               | tft_beam.AnalyzeAndTransformDataset(preprocessing_fn))
    first = transformed[0]
    assert first["mean"].tolist() == mean and first["divisor"].tolist() == std
    expected = (x[0] - np.float32(mean)) / np.float32(std)
    np.testing.assert_array_equal(first["z"], expected)
