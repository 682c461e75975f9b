"""reader.stats.drift: TFDV's L∞ and approximate Jensen–Shannon divergence, and drift entries.

Golden values are TFDV's own, from tensorflow_data_validation/anomalies/metrics_test.cc
(tensorflow/data-validation @ 710b32fae04f); the histograms below are that file's text
protos. Other expectations come from a NumPy re-derivation (a piecewise-linear CDF
per histogram, read at the union of boundaries) and from counting labels by hand.
"""

from __future__ import annotations

import collections
import json
import math

import numpy as np
import pytest
from google.protobuf import text_format
from tensorflow_metadata.proto.v0 import statistics_pb2

from reader.stats import drift


def feature(text: str) -> statistics_pb2.FeatureNameStatistics:
    return text_format.Parse(text, statistics_pb2.FeatureNameStatistics())


def numeric(buckets, num_nan: int = 0, kind: str | None = None, name: str = "x",
            ) -> statistics_pb2.FeatureNameStatistics:
    """A FLOAT feature with a histogram of ``(low, high, count)`` buckets of type
    ``kind``, or (None) the same buckets as both a STANDARD and a QUANTILES one."""
    result = statistics_pb2.FeatureNameStatistics(name=name, type=statistics_pb2.
                                                  FeatureNameStatistics.FLOAT)
    for each in (kind,) if kind else ("STANDARD", "QUANTILES"):
        histogram = result.num_stats.histograms.add(
            num_nan=num_nan, type=statistics_pb2.Histogram.HistogramType.Value(each))
        for low, high, count in buckets:
            histogram.buckets.add(low_value=low, high_value=high, sample_count=count)
    return result


def strings(counts: dict[str, float], name: str = "s") -> statistics_pb2.FeatureNameStatistics:
    """A STRING feature whose rank histogram lists ``counts`` in the given order."""
    result = statistics_pb2.FeatureNameStatistics(name=name, type=statistics_pb2.
                                                  FeatureNameStatistics.STRING)
    for label, count in counts.items():
        result.string_stats.rank_histogram.buckets.add(label=label, sample_count=count)
    return result


# Both comparators at 0.1, the thresholds these tests' distances are set against.
TENTHS = {"infinity_norm": 0.1, "jensen_shannon_divergence": 0.1}


def dataset(*features) -> statistics_pb2.DatasetFeatureStatistics:
    return statistics_pb2.DatasetFeatureStatistics(num_examples=1000, features=features)


INF = math.inf

# metrics_test.cc GetLInftyDistanceTests: (training, serving, expected).
LINF_GOLDEN = [
    ({}, {}, 0.0),
    ({"hello": 0.1, "world": 0.9}, {"hello": 0.3, "world": 0.7}, 0.2),
    ({"b": 0.9, "c": 0.1}, {"a": 0.3, "b": 0.7}, 0.3),
    ({"a": 0.3, "b": 0.7}, {"b": 0.9, "c": 0.1}, 0.3),
]


@pytest.mark.parametrize(("training", "serving", "expected"), LINF_GOLDEN)
def test_linf_distance_matches_tfdv_golden_values(training, serving, expected):
    assert drift.linf_distance(strings(serving), strings(training))[1] == pytest.approx(
        expected, abs=1e-5)


def test_linf_distance_equals_a_hand_count_and_names_the_value():
    control = ["a"] * 6 + ["b"] * 3 + ["c"]
    treatment = ["a"] * 2 + ["b"] * 2 + ["d"]
    # shares a .6/.4, b .3/.4, c .1/0, d 0/.2: the largest gap is .2, at "a" and at
    # "d"; TFDV keeps the last value in sorted order on a tie.
    distance = drift.linf_distance(strings(collections.Counter(control)),
                                   strings(collections.Counter(treatment)))
    assert distance[0] == "d"
    assert distance[1] == pytest.approx(0.2, abs=1e-12)


def test_linf_distance_of_a_numeric_feature_is_zero():
    assert drift.linf_distance(numeric([(0, 1, 3)]), numeric([(5, 6, 3)])) == ("", 0.0)


# metrics_test.cc JensenShannonDivergence tests: (name, histogram 1, histogram 2, JSD).
JSD_GOLDEN = [
    ("SameStatistics/numeric",
     numeric([(1.0, 2.3333333, 2.9866667), (2.3333333, 3.6666667, 1.0066667),
              (3.6666667, 5.0, 2.0066667)]),
     numeric([(1.0, 2.3333333, 2.9866667), (2.3333333, 3.6666667, 1.0066667),
              (3.6666667, 5.0, 2.0066667)]), 0.0),
    ("SameStatistics/string", strings({"b": 2, "a": 2, "c": 1}),
     strings({"b": 2, "a": 2, "c": 1}), 0.0),
    ("DifferentBucketBoundaries", numeric([(1, 2, 2), (2, 3, 2)]),
     numeric([(2, 4, 2), (4, 6, 2)]), 0.65563906222),
    ("NoOverlap", numeric([(0, 1, 2), (1, 2, 2)]), numeric([(3, 4, 2), (4, 6, 2)]), 1.0),
    ("OneHasAllValuesInOneBucket", numeric([(1, 1, 4)]),
     numeric([(2, 4, 2), (4, 6, 2)]), 1.0),
    ("BothHaveAllValuesInOneBucket", numeric([(1, 1, 4)]), numeric([(2.33, 2.33, 4)]), 1.0),
    ("OneHasOneBucketTheOtherHasMany", numeric([(10, 10, 21)]),
     numeric([(0, 4, 150), (4, 12, 200), (12, 20, 20)]), 1.0),
    ("NaNNotEqualToSelf", numeric([], num_nan=1), numeric([], num_nan=1), 1.0),
    ("WithNaNs", numeric([(1, 2, 3)], num_nan=1), numeric([(1, 2, 4)]), 0.13792538096),
    ("RankHistogram", strings({"b": 2, "a": 2, "c": 1}),
     strings({"a": 2, "Z": 1, "Y": 1, "X": 1}), 0.6),
    ("MultiplePointBinsPartialOverlap", numeric([(0, 0, 1), (1, 1, 1)]),
     numeric([(0, 0, 1), (2, 2, 1)]), 0.5),
    ("MixOfPointAndNonPointBoundaries", numeric([(0, 0, 1), (1, 2, 1)]),
     numeric([(1, 1, 1), (2, 2, 1)]), 1.0),
    ("InfiniteBinBoundaries", numeric([(-INF, 0, 1), (INF, INF, 1)]),
     numeric([(-INF, 0, 1), (INF, INF, 1)]), 1.0),
]


@pytest.mark.parametrize(("first", "second", "expected"), [g[1:] for g in JSD_GOLDEN],
                         ids=[g[0] for g in JSD_GOLDEN])
def test_jensen_shannon_divergence_matches_tfdv_golden_values(first, second, expected):
    # TFDV's tests pass (dataset_1, dataset_2) as (stats, control): treatment first.
    assert drift.jensen_shannon_divergence(second, first) == pytest.approx(expected, abs=1e-5)
    assert drift.jensen_shannon_divergence(first, second) == pytest.approx(expected, abs=1e-5)


def test_jensen_shannon_divergence_reads_the_chosen_histogram_type():
    # metrics_test.cc ReadsHistogramSource: only a QUANTILES histogram is there.
    quantiles = numeric([(1, 2.3333333, 2.9866667), (3.6666667, 5, 2.0066667)],
                        kind="QUANTILES")
    assert drift.jensen_shannon_divergence(
        quantiles, quantiles, statistics_pb2.Histogram.QUANTILES) == pytest.approx(0.0)
    with pytest.raises(ValueError, match="missing data"):
        drift.jensen_shannon_divergence(quantiles, quantiles)


@pytest.mark.parametrize(("first", "second", "message"), [
    # metrics_test.cc EmptyHistogram, EmptyRankHistogram, DifferentTypesHistogram.
    (numeric([]), numeric([(0, 4, 10)]), "empty histogram"),
    (numeric([(0, 4, 10)]), numeric([(0, 4, 0)]), "empty histogram"),
    (strings({}), strings({"a": 2, "Z": 1}), "missing data"),
    (strings({"b": 2, "a": 2}), numeric([(1, 2, 4)]), "both numeric or both string"),
    (strings({"a": 0, "b": 1}), strings({"a": 1}), "non-positive"),
])
def test_jensen_shannon_divergence_refuses_what_tfdv_refuses(first, second, message):
    with pytest.raises(ValueError, match=message):
        drift.jensen_shannon_divergence(first, second)


def test_jensen_shannon_divergence_drops_nan_when_it_rebuckets_as_tfdv_does():
    # RebucketHistogram builds histograms without num_nan: with different bounds
    # the NaN counts vanish, so this is the JSD of [1, 0] against [0.5, 0.5].
    nan_side = numeric([(0, 1, 4)], num_nan=4)
    other = numeric([(0, 2, 4)])
    p, q = np.array([1.0, 0.0]), np.array([0.5, 0.5])
    m = (p + q) / 2
    expected = (p[0] * np.log2(p[0] / m[0]) + sum(q * np.log2(q / m))) / 2
    assert drift.jensen_shannon_divergence(nan_side, other) == pytest.approx(expected)


def numpy_jsd(buckets_1, buckets_2) -> float:
    """JSD of two finite histograms, derived independently: each histogram's CDF is
    piecewise linear (uniform within a bucket), read at the union of boundaries."""
    bounds = np.union1d(*(np.ravel([b[:2] for b in bs]) for bs in (buckets_1, buckets_2)))
    masses = []
    for buckets in (buckets_1, buckets_2):
        edges = np.array([b[:2] for b in buckets])
        counts = np.array([b[2] for b in buckets])
        cdf = sum(c * np.clip((bounds - lo) / (hi - lo), 0, 1)
                  for (lo, hi), c in zip(edges, counts, strict=True))
        masses.append(np.diff(cdf) / counts.sum())
    p, q = masses
    m = (p + q) / 2
    kl = [np.sum(a[a > 0] * np.log2(a[a > 0] / m[a > 0])) for a in (p, q)]
    return min(sum(kl) / 2, 1.0)


def random_buckets(rng: np.random.Generator) -> list[tuple[float, float, float]]:
    """Contiguous buckets on random boundaries, some of them empty."""
    bounds = np.sort(rng.choice(np.arange(-20, 21) * 0.5, size=rng.integers(2, 12), replace=False))
    counts = rng.integers(0, 50, size=len(bounds) - 1).astype(float)
    counts[rng.integers(len(counts))] += 1
    return [(float(lo), float(hi), float(c))
            for lo, hi, c in zip(bounds[:-1], bounds[1:], counts, strict=True)]


def test_jensen_shannon_divergence_equals_a_numpy_derivation_on_random_histograms():
    rng = np.random.default_rng(50)
    for _ in range(200):
        first, second = random_buckets(rng), random_buckets(rng)
        assert drift.jensen_shannon_divergence(numeric(first), numeric(second)) == \
            pytest.approx(numpy_jsd(first, second), abs=1e-12)


def test_compare_writes_one_entry_per_feature_in_the_plans_form():
    control = dataset(numeric([(0, 1, 5), (1, 2, 5)], name="brightness"),
                      strings({"cat": 6, "dog": 4}, name="label"))
    treatment = dataset(numeric([(0, 1, 9), (1, 2, 1)], name="brightness"),
                        strings({"cat": 5, "dog": 5}, name="label"))
    entries = drift.compare(control, treatment, split="test", baseline="train",
                            thresholds=TENTHS)
    p, q = np.array([0.9, 0.1]), np.array([0.5, 0.5])
    m = (p + q) / 2
    jsd = (np.sum(p * np.log2(p / m)) + np.sum(q * np.log2(q / m))) / 2
    assert entries == [
        {"split": "test", "baseline": "train", "feature": "brightness",
         "comparator": "jensen_shannon_divergence", "distance": float(f"{jsd:.6g}"),
         "threshold": 0.1, "over": True, "judged": True},
        {"split": "test", "baseline": "train", "feature": "label",
         "comparator": "infinity_norm", "distance": 0.1, "threshold": 0.1, "over": False,
         "judged": True},
    ]
    assert json.loads(json.dumps(entries)) == entries


@pytest.mark.parametrize("smaller", [1, drift.MIN_EXAMPLES - 1])
def test_compare_on_too_few_examples_gives_distances_but_judges_nothing(smaller):
    control = dataset(numeric([(0, 1, 5), (1, 2, 5)], name="brightness"))
    treatment = dataset(numeric([(0, 1, 9), (1, 2, 1)], name="brightness"))
    treatment.num_examples = smaller
    [entry] = drift.compare(control, treatment, split="test", baseline="train",
                            thresholds=TENTHS)
    assert entry["distance"] > entry["threshold"]
    assert (entry["over"], entry["judged"]) == (False, False)
    treatment.num_examples = drift.MIN_EXAMPLES
    [entry] = drift.compare(control, treatment, split="test", baseline="train",
                            thresholds=TENTHS)
    assert (entry["over"], entry["judged"]) == (True, True)


def test_compare_reports_a_feature_on_one_side_only_as_missing():
    control = dataset(numeric([(0, 1, 5)], name="gone"), numeric([(0, 1, 5)], name="kept"))
    treatment = dataset(numeric([(0, 1, 5)], name="kept"), numeric([(0, 1, 5)], name="new"))
    entries = drift.compare(control, treatment, split="validation", baseline="train")
    missing = [(e["feature"], e["comparator"], e["distance"], e["threshold"], e["over"])
               for e in entries if e["over"]]
    assert missing == [("gone", "missing_in_split", None, None, True),
                       ("new", "missing_in_baseline", None, None, True)]
    assert [(e["feature"], e["distance"], e["over"]) for e in entries[2:]] == [
        ("kept", 0.0, False)]


def test_compare_without_a_histogram_on_one_side_is_over_with_no_distance():
    control = dataset(numeric([(0, 1, 5)], name="x"), numeric([], name="never"))
    no_values = statistics_pb2.FeatureNameStatistics(
        name="x", type=statistics_pb2.FeatureNameStatistics.FLOAT)
    no_values.num_stats.common_stats.num_missing = 10
    treatment = dataset(no_values, numeric([], name="never"))
    entries = drift.compare(control, treatment, split="test", baseline="train")
    assert [(e["feature"], e["distance"], e["over"]) for e in entries] == [
        ("x", None, True), ("never", None, False)]


def test_compare_judges_over_on_the_rounded_distance_and_keeps_only_chosen_features():
    control = dataset(strings({"a": 1, "b": 2}, name="label"),
                      strings({"rgb": 3}, name="mode"), numeric([(0, 1, 1)], name="width"))
    treatment = dataset(strings({"a": 1000001, "b": 2000000}, name="label"),
                        strings({"l": 3}, name="mode"), numeric([(0, 1, 1)], name="width"))
    # |2/3 - 2000000/3000001| = 2/9000003 = 2.2222215e-7, over 2.22222e-7 until rounded.
    entries = drift.compare(control, treatment, split="test", baseline="v00001/train",
                            thresholds={"infinity_norm": 2.22222e-7}, features=["label"])
    assert [(e["feature"], e["distance"], e["over"]) for e in entries] == [
        ("label", 2.22222e-7, False)]


def test_sort_entries_puts_over_first_then_split_baseline_feature_comparator():
    def entry(split, feature, over):
        return {"split": split, "baseline": "train", "feature": feature,
                "comparator": "infinity_norm", "distance": 0.0, "threshold": 0.1, "over": over}
    entries = [entry("validation", "a", False), entry("test", "b", False),
               entry("validation", "b", True), entry("test", "z", True)]
    assert [(e["split"], e["feature"]) for e in drift.sort_entries(entries)] == [
        ("test", "z"), ("validation", "b"), ("test", "b"), ("validation", "a")]
