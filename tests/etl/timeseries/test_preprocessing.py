"""etl/timeseries/preprocessing.py: the manifest's normalisation entry from the analysis
instances."""

from __future__ import annotations

import apache_beam as beam
import numpy as np
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to

from etl.core.transform import exact_stats
from etl.timeseries.preprocessing import (
    DescribeNormalisation,
    SeriesPreprocessing,
    analysis_instance,
)

# Never the plain DirectRunner: it first tries to download Prism, which stalls offline.
RUNNER = "apache_beam.runners.portability.fn_api_runner.FnApiRunner"


def _instances() -> list[dict]:
    """Analysis instances of two series: train rows 1, 2, 4 and 8.5 in the first
    column; the second column is constant (its divisor is 1)."""
    a = np.array([[1.0, 5.0], [2.0, 5.0], [4.0, 5.0]], np.float32)
    b = np.array([[8.5, 5.0]], np.float32)
    return [analysis_instance("a", exact_stats.moments_of(a), None, 0),
            analysis_instance("b", exact_stats.moments_of(b), None, 0)]


def test_describe_normalisation_records_the_global_train_statistics():
    # Mean 3.875, population std sqrt(8.296875) as float32.
    expected = {"normalisation": {"per_series": False, "mean": [3.875, 5.0],
                                  "std": [float(np.float32(np.sqrt(8.296875))), 1.0]}}
    config = SeriesPreprocessing(window_size=2, horizon=1, num_features=2,
                                 classification=False)
    with TestPipeline(runner=RUNNER) as p:
        entry = (p | beam.Create(_instances(), reshuffle=False)
                 | DescribeNormalisation(config))
        assert_that(entry, equal_to([expected]))


def test_describe_normalisation_per_series_names_no_statistics():
    config = SeriesPreprocessing(window_size=2, horizon=1, num_features=2,
                                 classification=False, per_series=True)
    with TestPipeline(runner=RUNNER) as p:
        entry = (p | beam.Create(_instances(), reshuffle=False)
                 | DescribeNormalisation(config))
        assert_that(entry, equal_to([{"normalisation": {"per_series": True}}]))
