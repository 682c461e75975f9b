"""TFDV-format statistics against NumPy/pandas on the same facts, and the histogram
port against TFDV's own expectations (quantiles_util_test.py)."""

from __future__ import annotations

import collections
import math
import pickle
import random

import numpy as np
import pandas as pd
import pytest
from google.protobuf import text_format
from tensorflow_metadata.proto.v0 import statistics_pb2

from etl.core.stats import histograms as stats_histograms
from etl.core.stats import partials as stats_partials
from etl.core.stats.features import (
    EPSILON,
    FLOAT,
    INT,
    STRING,
    FeatureSpec,
    SplitStatistics,
    merge_in_order,
    statistics_list,
    write_statistics,
)

STANDARD, QUANTILES = statistics_pb2.Histogram.STANDARD, statistics_pb2.Histogram.QUANTILES
SPECS = (FeatureSpec("x", FLOAT), FeatureSpec("n", INT), FeatureSpec("label", STRING),
         FeatureSpec("tags", STRING), FeatureSpec("never", FLOAT))


def _facts(seed: int, size: int) -> pd.DataFrame:
    """Facts with missing values of every form: NaN, None, absent (``never``)."""
    rng = np.random.default_rng(seed)
    x = rng.normal(50.0, 7.0, size)
    x[rng.random(size) < 0.1] = np.nan
    x[rng.random(size) < 0.05] = 0.0
    labels = rng.choice(["cat", "dog", "émeu", "ox"], size, p=[0.5, 0.3, 0.15, 0.05])
    tags = [None if k == 0 else [f"t{j}" for j in rng.integers(0, 5, k)]
            for k in rng.integers(0, 4, size)]
    return pd.DataFrame({"x": x, "n": rng.integers(-3, 1000, size),
                         "label": [None if i % 7 == 0 else v for i, v in enumerate(labels)],
                         "tags": tags})


def _columns(frame: pd.DataFrame) -> dict:
    return {"x": frame["x"].to_numpy(), "n": frame["n"].to_numpy(),
            "label": list(frame["label"]), "tags": list(frame["tags"])}


def _accumulate(frame: pd.DataFrame, batch: int = 1000) -> SplitStatistics:
    stats = SplitStatistics(SPECS)
    for start in range(0, len(frame), batch):
        part = frame.iloc[start:start + batch]
        stats.add(len(part), _columns(part))
    return stats


def _feature(dataset: statistics_pb2.DatasetFeatureStatistics, name: str):
    (feature,) = [f for f in dataset.features if list(f.path.step) == [name]]
    return feature


def _histogram(numeric: statistics_pb2.NumericStatistics, kind: int):
    (histogram,) = [h for h in numeric.histograms if h.type == kind]
    return histogram


@pytest.fixture(scope="module")
def facts() -> pd.DataFrame:
    return _facts(0, 20_000)


@pytest.fixture(scope="module")
def dataset(facts) -> statistics_pb2.DatasetFeatureStatistics:
    return _accumulate(facts).to_proto("train")


def test_feature_spec_rejects_an_unknown_kind():
    with pytest.raises(ValueError, match="kind must be one of"):
        FeatureSpec("x", "double")


def test_split_statistics_rejects_repeated_feature_names():
    with pytest.raises(ValueError, match="unique"):
        SplitStatistics([FeatureSpec("x", FLOAT), FeatureSpec("x", INT)])


def test_split_statistics_numeric_moments_are_exact(facts, dataset):
    x = facts["x"].dropna()
    numeric = _feature(dataset, "x").num_stats
    assert dataset.num_examples == len(facts) and dataset.name == "train"
    assert _feature(dataset, "x").type == statistics_pb2.FeatureNameStatistics.FLOAT
    assert numeric.common_stats.num_non_missing == len(x)
    assert numeric.common_stats.num_missing == facts["x"].isna().sum()
    assert numeric.mean == pytest.approx(x.mean(), rel=1e-12)
    assert numeric.std_dev == pytest.approx(np.std(x.to_numpy()), rel=1e-12)
    assert (numeric.min, numeric.max, numeric.num_zeros) == (x.min(), x.max(), (x == 0).sum())


def test_split_statistics_takes_numpy_ints_exactly(facts, dataset):
    feature = _feature(dataset, "n")
    n = facts["n"].to_numpy()
    assert feature.type == statistics_pb2.FeatureNameStatistics.INT
    assert (feature.num_stats.min, feature.num_stats.max) == (n.min(), n.max())
    assert feature.num_stats.mean == pytest.approx(n.mean(), rel=1e-12)
    assert feature.num_stats.common_stats.num_missing == 0


def test_split_statistics_quantiles_are_within_the_rank_error(facts, dataset):
    x = np.sort(facts["x"].dropna().to_numpy())
    numeric = _feature(dataset, "x").num_stats

    def rank_error(value: float, fraction: float) -> float:
        low, high = np.searchsorted(x, value, "left"), np.searchsorted(x, value, "right")
        target = fraction * x.size
        return 0.0 if low <= target <= high else min(abs(low - target), abs(high - target))

    assert rank_error(numeric.median, 0.5) <= EPSILON * x.size
    buckets = _histogram(numeric, QUANTILES).buckets
    assert len(buckets) == 10
    assert buckets[0].low_value == x[0] and buckets[-1].high_value == x[-1]
    for i, bucket in enumerate(buckets):
        assert rank_error(bucket.high_value, (i + 1) / 10) <= EPSILON * x.size
    assert sum(b.sample_count for b in buckets) == pytest.approx(x.size)


def test_sketch_sample_keeps_small_batches_whole_and_weighs_large_ones_exactly():
    small = np.arange(float(stats_partials.SAMPLE_ABOVE))
    assert stats_partials.sketch_sample(small)[1] is None
    values = np.random.default_rng(3).normal(size=stats_partials.SAMPLE_ABOVE * 2 + 3)
    sample, weights = stats_partials.sketch_sample(values)
    assert weights.sum() == values.size  # every value counted once, runt included
    assert sample.size < values.size // 2
    assert (sample.min(), sample.max()) == (values.min(), values.max())
    # Minimum and maximum in one run of the stride: both still reach the sketch.
    values[[8, 9]] = values.min() - 1.0, values.max() + 1.0
    sample, weights = stats_partials.sketch_sample(values)
    assert (sample.min(), sample.max()) == (values.min(), values.max())
    assert weights.sum() == values.size
    values = values[:-3]  # no runt
    sample, weights = stats_partials.sketch_sample(values)
    assert weights.sum() == values.size
    again, _ = stats_partials.sketch_sample(values.copy())
    assert np.array_equal(sample, again)  # seeded by the count: the same every run


def test_split_statistics_quantiles_of_a_sampled_periodic_series_are_within_the_rank_error():
    # A daily cycle of hourly values (period 24, a multiple of the sample's stride):
    # a sample at a fixed offset of each run would see only some hours.
    hours = np.arange(400_000)
    values = 100.0 + 50.0 * np.sin(2 * np.pi * hours / 24) + (hours % 24 == 5) * 500.0
    stats = SplitStatistics([FeatureSpec("v", FLOAT)])
    stats.add(values.size, {"v": values})
    numeric = stats.to_proto("s").features[0].num_stats
    x = np.sort(values)
    buckets = _histogram(numeric, QUANTILES).buckets
    assert sum(b.sample_count for b in buckets) == pytest.approx(x.size, rel=1e-12)
    assert buckets[0].low_value == x[0] and buckets[-1].high_value == x[-1]
    for i, bucket in enumerate(buckets):
        low = np.searchsorted(x, bucket.high_value, "left")
        high = np.searchsorted(x, bucket.high_value, "right")
        target = (i + 1) / 10 * x.size
        error = 0.0 if low <= target <= high else min(abs(low - target), abs(high - target))
        assert error <= (EPSILON + 0.005) * x.size
    # The spike at hour 5, 1/24 of the values, fills the top equal-width bucket.
    top = _histogram(numeric, STANDARD).buckets[-1]
    assert abs(top.sample_count - np.count_nonzero(values > top.low_value)) <= (
        2 * (EPSILON + 1e-3) * x.size)
    assert top.sample_count > 0.03 * x.size


def test_split_statistics_standard_histogram_matches_numpy(facts, dataset):
    x = facts["x"].dropna().to_numpy()
    histogram = _histogram(_feature(dataset, "x").num_stats, STANDARD)
    edges = np.linspace(x.min(), x.max(), 11)
    assert [b.low_value for b in histogram.buckets] == pytest.approx(edges[:-1], rel=1e-15)
    assert [b.high_value for b in histogram.buckets] == pytest.approx(edges[1:], rel=1e-15)
    counts = np.array([b.sample_count for b in histogram.buckets])
    assert counts.sum() == pytest.approx(x.size)
    # Each edge's rank is off by at most eps*N, plus the interpolation inside one of
    # the 1000 quantile bins.
    assert np.abs(counts - np.histogram(x, edges)[0]).max() <= 2 * (EPSILON + 1e-3) * x.size
    assert histogram.num_nan == 0


def test_split_statistics_all_equal_values_make_one_bucket():
    stats = SplitStatistics([FeatureSpec("v", FLOAT)])
    stats.add(500, {"v": np.full(500, 2.5)})
    numeric = stats.to_proto("s").features[0].num_stats
    assert (numeric.mean, numeric.std_dev, numeric.median) == (2.5, 0.0, 2.5)
    (bucket,) = _histogram(numeric, STANDARD).buckets
    assert (bucket.low_value, bucket.high_value, bucket.sample_count) == (2.5, 2.5, 500)


def test_split_statistics_strings_count_exactly(facts, dataset):
    labels = facts["label"].dropna()
    counter = collections.Counter(labels)
    strings = _feature(dataset, "label").string_stats
    expected = sorted(((c, v.encode()) for v, c in counter.items()), reverse=True)
    assert [(b.sample_count, b.label.encode()) for b in strings.rank_histogram.buckets] \
        == expected
    assert [(t.frequency, t.value.encode()) for t in strings.top_values] == expected
    assert [(b.low_rank, b.high_rank) for b in strings.rank_histogram.buckets] == \
        [(i, i) for i in range(len(counter))]
    assert strings.unique == len(counter)
    assert strings.avg_length == pytest.approx(labels.map(lambda v: len(v.encode())).mean())
    assert strings.common_stats.num_missing == facts["label"].isna().sum()


def test_split_statistics_counts_a_thousand_values_exactly_across_merges():
    rng = np.random.default_rng(1)
    values = np.repeat([f"v{i:04d}" for i in range(1000)], rng.integers(1, 30, 1000))
    rng.shuffle(values)
    parts = []
    for key, chunk in enumerate(np.array_split(values, 9)):
        part = SplitStatistics([FeatureSpec("v", STRING)])
        part.add(len(chunk), {"v": chunk})
        parts.append((key, part))
    strings = merge_in_order(parts).to_proto("s").features[0].string_stats
    got = {b.label: b.sample_count for b in strings.rank_histogram.buckets}
    assert got == collections.Counter(values.tolist())
    assert [t.value for t in strings.top_values] == \
        [b.label for b in strings.rank_histogram.buckets[:20]]
    assert strings.unique == 1000


def test_split_statistics_multi_valued_valency(facts, dataset):
    sizes = np.array([0 if t is None else len(t) for t in facts["tags"]])
    present = sizes[sizes > 0]
    common = _feature(dataset, "tags").string_stats.common_stats
    assert (common.num_non_missing, common.num_missing) == (present.size, (sizes == 0).sum())
    assert (common.min_num_values, common.max_num_values) == (present.min(), present.max())
    assert common.tot_num_values == present.sum()
    assert common.avg_num_values == pytest.approx(present.mean(), rel=1e-6)
    histogram = common.num_values_histogram
    assert histogram.type == QUANTILES and len(histogram.buckets) == 10
    assert sum(b.sample_count for b in histogram.buckets) == pytest.approx(present.size)
    flat = collections.Counter(v for t in facts["tags"] if t is not None for v in t)
    assert {b.label: b.sample_count for b in
            _feature(dataset, "tags").string_stats.rank_histogram.buckets} == flat


def test_split_statistics_missing_forms_are_missing():
    stats = SplitStatistics([FeatureSpec("f", FLOAT), FeatureSpec("l", INT),
                             FeatureSpec("s", STRING), FeatureSpec("absent", STRING)])
    stats.add(4, {"f": [1.0, None, math.nan, 3.0], "l": [[1, 2], None, [], [math.nan]],
                  "s": np.array(["a", None, "b", None], dtype=object)})
    features = stats.to_proto("s").features
    common = [f.num_stats.common_stats if f.HasField("num_stats")
              else f.string_stats.common_stats for f in features]
    assert [(c.num_non_missing, c.num_missing, c.tot_num_values) for c in common] == \
        [(2, 2, 2), (1, 3, 2), (2, 2, 2), (0, 4, 0)]
    assert features[0].num_stats.mean == 2.0
    assert features[3].string_stats == statistics_pb2.StringStatistics(
        common_stats=statistics_pb2.CommonStatistics(num_missing=4))


def test_split_statistics_of_an_empty_split():
    dataset = SplitStatistics(SPECS).to_proto("test")
    assert dataset.num_examples == 0 and len(dataset.features) == len(SPECS)
    assert [f.path.step[0] for f in dataset.features] == [s.name for s in SPECS]
    assert all(f.num_stats == statistics_pb2.NumericStatistics(
        common_stats=statistics_pb2.CommonStatistics())
        for f in dataset.features if f.HasField("num_stats"))


@pytest.mark.parametrize(("columns", "message"), [
    ({"y": [1.0]}, "Undeclared features"),
    ({"f": [1.0, 2.0]}, "2 entries for 1 examples"),
    ({"i": [1.5]}, "INT feature, got fractions"),
    ({"i": np.array([0.5])}, "INT feature, got fractions"),
    ({"s": np.array([1.0])}, "STRING feature, got numbers"),
    ({"s": [b"x"]}, "STRING feature, got binary"),
    ({"f": ["x"]}, "FLOAT feature, got string"),
    ({"f": [True]}, "FLOAT feature, got bool"),
    ({"f": [1.0], "s": [[1.0, "a"]]}, "cannot read its column"),
])
def test_split_statistics_rejects_bad_columns_and_adds_nothing(columns, message):
    stats = SplitStatistics([FeatureSpec("f", FLOAT), FeatureSpec("i", INT),
                             FeatureSpec("s", STRING)])
    before = stats.to_proto("s").SerializeToString()
    with pytest.raises(ValueError, match=message):
        stats.add(1, columns)
    assert stats.to_proto("s").SerializeToString() == before


def test_split_statistics_merge_equals_one_accumulator(facts):
    whole = _accumulate(facts).to_proto("s")
    halves = _accumulate(facts.iloc[:7000]).merge(_accumulate(facts.iloc[7000:]))
    merged = halves.to_proto("s")
    assert halves.num_examples == len(facts)
    for ours, theirs in zip(merged.features, whole.features, strict=True):
        for stats in ("num_stats", "string_stats"):
            if ours.HasField(stats):
                a, b = getattr(ours, stats), getattr(theirs, stats)
                assert a.common_stats.num_non_missing == b.common_stats.num_non_missing
                assert a.common_stats.tot_num_values == b.common_stats.tot_num_values
    assert _feature(merged, "x").num_stats.mean == pytest.approx(
        facts["x"].mean(), rel=1e-12)
    assert _feature(merged, "label").string_stats.rank_histogram == \
        _feature(whole, "label").string_stats.rank_histogram


def test_split_statistics_merge_refuses_other_features():
    with pytest.raises(ValueError, match="different features"):
        SplitStatistics(SPECS).merge(SplitStatistics(SPECS[:2]))


def test_merge_in_order_ignores_the_delivery_order(facts):
    parts = [(f"shard-{i:02d}", _accumulate(facts.iloc[i::6], batch=2000)) for i in range(6)]
    for _, part in parts:
        part.compact()
    results = set()
    for seed in range(3):
        shuffled = parts[:]
        random.Random(seed).shuffle(shuffled)
        results.add(merge_in_order(shuffled).to_proto("s").SerializeToString(
            deterministic=True))
    assert len(results) == 1
    assert merge_in_order([]) is None
    with pytest.raises(ValueError, match="distinct sort keys"):
        merge_in_order([(1, parts[0][1]), (1, parts[1][1])])


def test_split_statistics_pickles_after_compact(facts):
    stats = _accumulate(facts)
    stats.compact()
    copy = pickle.loads(pickle.dumps(stats))
    assert copy.to_proto("s") == stats.to_proto("s")


def test_split_statistics_compact_leaves_small_sketches_raw():
    # Compacted, a quantiles sketch takes ~180 kB; a shard's thousand values take 16 kB.
    stats = SplitStatistics([FeatureSpec("v", FLOAT)])
    stats.add(1000, {"v": np.arange(1000.0)})
    size = len(pickle.dumps(stats))
    stats.compact()
    assert len(pickle.dumps(stats)) == size < 20_000


def test_split_statistics_still_adds_merges_and_pickles_after_to_proto(facts):
    stats = _accumulate(facts.iloc[:5000])
    stats.to_proto("s")
    stats.add(len(facts.iloc[5000:8000]), _columns(facts.iloc[5000:8000]))
    stats.merge(_accumulate(facts.iloc[8000:]))
    copy = pickle.loads(pickle.dumps(stats))
    dataset = copy.to_proto("s")
    assert dataset.num_examples == len(facts)
    assert _feature(dataset, "x").num_stats.common_stats.num_non_missing == \
        facts["x"].notna().sum()


def test_write_statistics_writes_one_record_tfdv_loads(tmp_path, dataset):
    import tensorflow as tf

    path = str(tmp_path / "train.tfrecord")
    write_statistics(path, dataset)
    records = list(tf.compat.v1.io.tf_record_iterator(path))
    assert len(records) == 1
    loaded = statistics_pb2.DatasetFeatureStatisticsList.FromString(records[0])
    assert loaded == statistics_list([dataset])
    text = text_format.MessageToString(loaded)
    assert text_format.Parse(text, statistics_pb2.DatasetFeatureStatisticsList()) == loaded


# --- the histogram port, on TFDV's own cases (quantiles_util_test.py) ----------------------

def _flat_buckets(histogram) -> list[float]:
    return [v for b in histogram.buckets for v in (b.low_value, b.high_value, b.sample_count)]


def _flat(buckets: list[tuple[float, float, float]]) -> list[float]:
    return [v for bucket in buckets for v in bucket]


@pytest.mark.parametrize(("quantiles", "weights", "expected"), [
    ([1, 60, 120, 180, 240, 300], [1, 60, 120, 180, 240, 300],
     [(1, 60, 60), (60, 120, 60), (120, 180, 60), (180, 240, 60), (240, 300, 60)]),
    ([1, 1, 1], [2, 2, 2], [(1, 1, 1), (1, 1, 1)]),
    ([1, 2, 2], [1, 2, 2], [(1, 2, 1.5), (2, 2, 0.5)]),
    ([1, 2, 2, 2, 3, 3, 4], [1, 34, 34, 34, 51, 51, 60],
     [(1, 2, 12), (2, 2, 11), (2, 2, 11), (2, 3, 8.5), (3, 3, 8.5), (3, 4, 9)]),
])
def test_quantiles_histogram_matches_tfdv(quantiles, weights, expected):
    histogram = stats_histograms.quantiles_histogram(
        np.array(quantiles, dtype=np.float32), np.array(weights))
    assert histogram.type == QUANTILES
    assert _flat_buckets(histogram) == pytest.approx(_flat(expected))


INF = math.inf


@pytest.mark.parametrize(("quantiles", "weights", "bounds", "num", "pos_inf", "expected"), [
    ([1, 2, 2, 2, 3, 3, 4], [1, 34, 34, 34, 51, 51, 60], (1, 4), 2, 0,
     [(1, 2.5, 38.25), (2.5, 4, 21.75)]),
    ([1, 2, 3, 4, 5, 7], [2, 5, 7, 10, 12, 15], (1, 7), 2, 0, [(1, 4, 10), (4, 7, 5)]),
    ([1, 2, 3, 4, 5, 7], [2, 5, 7, 10, 12, 15], (1, 7), 4, 0,
     [(1, 2.5, 6), (2.5, 4, 4), (4, 5.5, 2.75), (5.5, 7, 2.25)]),
    ([5, 5, 5, 5, 5], [3, 3, 3, 3, 3], (5, 5), 1, 0, [(5, 5, 3)]),
    ([-INF, -INF, 1, 2, 3], [5, 7, 10, 12, 15], (1, 3), 4, 0,
     [(-INF, -INF, 7), (1, 1.5, 2.5), (1.5, 2, 2.5), (2, 2.5, 1.5), (2.5, 3, 1.5)]),
    ([1, 2, 3, INF, INF], [3, 5, 6, 7, 8], (1, 4), 2, 0.5,
     [(1, 2.5, 5.5), (2.5, 4, 2), (INF, INF, 0.5)]),
    ([-INF, 1, INF], [3, 5, 9], (1, 1), 99, 4, [(-INF, -INF, 3), (1, 1, 2), (INF, INF, 4)]),
    ([-INF, 1, 2, 3, INF], [3, 5, 6, 7, 8], (1, 4), 2, 0.5,
     [(-INF, -INF, 3), (1, 2.5, 3.5), (2.5, 4, 1), (INF, INF, 0.5)]),
    ([-INF, INF], [1, 5], (-INF, INF), 99, 0.5, [(-INF, INF, 5)]),
    ([-1.7976931348623157e308, 0, 1.7976931348623157e308], [1, 3, 5],
     (-1.7976931348623157e308, 1.7976931348623157e308), 3, 0, []),
])
def test_equi_width_histogram_matches_tfdv(quantiles, weights, bounds, num, pos_inf,
                                           expected):
    histogram = stats_histograms.equi_width_histogram(
        np.array(quantiles, dtype=float), np.array(weights, dtype=float), *bounds, num,
        pos_inf)
    assert histogram.type == STANDARD
    assert _flat_buckets(histogram) == pytest.approx(_flat(expected))


def test_find_median_matches_tfdv():
    assert [stats_histograms.find_median(np.array(q)) for q in
            ([5.0], [3.0, 5.0], [3.0, 4.0, 5.0], [3.0, 4.0, 5.0, 6.0])] == [5.0, 4.0, 4.0, 4.5]
