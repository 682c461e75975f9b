"""One feature's partial statistics on tfx_bsl's sketches, and the parts of TFDV's
``FeatureNameStatistics`` they make (``etl.core.stats.features`` assembles them).

Each partial adds a batch's ``Column`` and merges with another of the same kind;
what it keeps is what TFDV's ``BasicStatsGenerator`` and
``TopKUniquesSketchStatsGenerator`` keep, with their default options.
"""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from tensorflow_metadata.proto.v0 import statistics_pb2
from tfx_bsl.sketches import KmvSketch, MisraGriesSketch, QuantilesSketch

from etl.core.stats import histograms as stats_histograms
from etl.core.stats.columns import FLOAT, INT, STRING, Column, FeatureSpec

# TFDV's defaults (StatsOptions, BasicStatsGenerator).
EPSILON = 0.01
NUM_VALUES_HISTOGRAM_BUCKETS = 10
NUM_HISTOGRAM_BUCKETS = 10
NUM_QUANTILES_HISTOGRAM_BUCKETS = 10
# The STANDARD and QUANTILES histograms both come from this many quantiles.
_QUANTILES_FACTOR = 100
NUM_TOP_VALUES = 20
NUM_RANK_HISTOGRAM_BUCKETS = 1000
# Misra-Gries counts are exact while the distinct values fit its buckets (also after
# merges); one bucket per rank-histogram bucket, so labels are counted exactly.
EXACT_COUNT_LIMIT = NUM_RANK_HISTOGRAM_BUCKETS
# A KMV sketch's estimate is exact while the distinct values fit its buckets.
KMV_BUCKETS = 1024
# A quantiles sketch stores up to ~11k values raw (16 bytes each); compacted it takes
# ~180 kB at EPSILON 0.01 whatever the count (measured), so smaller ones stay raw.
_COMPACT_MIN_VALUES = 12_000
# Above this many values in one batch, the quantiles sketch is fed a stratified sample
# (``sketch_sample``): adding a value to it costs ~0.06 s a million, the largest cost
# of a series job's statistics, while one value of every SAMPLE_STRIDE adds a rank
# error of about 0.001 to the sketch's EPSILON (0.01). Image facts (a shard's
# thousands) are never sampled.
SAMPLE_ABOVE = 1 << 16
SAMPLE_STRIDE = 4
# TFDV's top-k sketch settings (constants.py, top_k_uniques_sketch_stats_generator.py);
# values are str, so never invalid UTF-8.
_LARGE_BYTES_PLACEHOLDER = "__LARGE_BYTES__"
_LARGE_STRING_THRESHOLD = 1024

_TYPES = {INT: statistics_pb2.FeatureNameStatistics.INT,
          FLOAT: statistics_pb2.FeatureNameStatistics.FLOAT,
          STRING: statistics_pb2.FeatureNameStatistics.STRING}


def sketch_sample(values: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
    """(the values a quantiles sketch gets, their weights; None: each 1).

    Up to ``SAMPLE_ABOVE`` values, all of them. Beyond, one value of each run of
    ``SAMPLE_STRIDE`` consecutive ones, at a pseudo-random position in the run (so
    a period in the data cannot line up with the sample), weighted
    ``SAMPLE_STRIDE``. The runt and the runs holding the minimum or the maximum
    go in whole, each value weighing 1, so the weights add up to ``values.size``
    exactly and the sketch's ends are the data's. The generator is seeded by the
    count: the same values give the same sample on every run and machine.
    """
    if values.size <= SAMPLE_ABOVE:
        return values, None
    runs = values.size // SAMPLE_STRIDE
    offsets = np.random.default_rng(values.size).integers(
        0, SAMPLE_STRIDE, size=runs, dtype=np.int64)
    whole = np.zeros(runs, bool)
    for extreme in (int(np.argmin(values)), int(np.argmax(values))):
        if extreme < runs * SAMPLE_STRIDE:
            whole[extreme // SAMPLE_STRIDE] = True
    sampled = np.flatnonzero(~whole)
    picks = sampled * SAMPLE_STRIDE + offsets[sampled]
    kept = np.concatenate([
        (np.flatnonzero(whole)[:, None] * SAMPLE_STRIDE + np.arange(SAMPLE_STRIDE)).ravel(),
        np.arange(runs * SAMPLE_STRIDE, values.size)])
    weights = np.concatenate([np.full(picks.size, float(SAMPLE_STRIDE)),
                              np.ones(kept.size)])
    return values[np.concatenate([picks, kept])], weights


def _quantiles_sketch() -> QuantilesSketch:
    return QuantilesSketch(eps=EPSILON, max_num_elements=1 << 32, num_streams=1)


class _Valency:
    """Presence and values per example of one feature (TFDV's common stats)."""

    def __init__(self) -> None:
        self.num_non_missing = 0
        self.min_num_values = 0  # Meaningful once num_non_missing > 0.
        self.max_num_values = 0
        self.tot_num_values = 0
        self.sketch = _quantiles_sketch()
        self.sketch_entries = 0  # (size, examples) pairs the sketch holds, at most.

    def add(self, column: Column) -> None:
        if column.num_present == 0:
            return
        if column.counts is None:  # One value in each example that has the feature.
            sizes, examples = np.array([1.0]), np.array([float(column.num_present)])
        else:
            sizes, examples = np.unique(column.counts[column.counts > 0], return_counts=True)
        low, high = int(sizes[0]), int(sizes[-1])
        self.min_num_values = min(self.min_num_values, low) if self.num_non_missing else low
        self.num_non_missing += column.num_present
        self.max_num_values = max(self.max_num_values, high)
        self.tot_num_values += int(np.dot(sizes.astype(np.int64), examples.astype(np.int64)))
        # Few distinct sizes: add each once with its number of examples (as TFDV does).
        self.sketch.AddValues(pa.array(sizes.astype(np.float64)),
                              pa.array(examples.astype(np.float64)))
        self.sketch_entries += sizes.size

    def merge(self, other: _Valency) -> None:
        if other.num_non_missing:
            self.min_num_values = other.min_num_values if not self.num_non_missing else min(
                self.min_num_values, other.min_num_values)
        self.num_non_missing += other.num_non_missing
        self.max_num_values = max(self.max_num_values, other.max_num_values)
        self.tot_num_values += other.tot_num_values
        self.sketch.Merge(other.sketch)
        self.sketch_entries += other.sketch_entries

    def to_proto(self, num_examples: int) -> statistics_pb2.CommonStatistics:
        result = statistics_pb2.CommonStatistics(
            num_non_missing=self.num_non_missing,
            num_missing=num_examples - self.num_non_missing,
            tot_num_values=self.tot_num_values)
        if self.num_non_missing:
            result.min_num_values = self.min_num_values
            result.max_num_values = self.max_num_values
            result.avg_num_values = self.tot_num_values / self.num_non_missing
            result.num_values_histogram.CopyFrom(stats_histograms.quantiles_histogram(
                *stats_histograms.sketch_quantiles(self.sketch, NUM_VALUES_HISTOGRAM_BUCKETS)))
        return result


class _Numbers:
    """Moments, extremes and quantiles of a numeric feature's values."""

    def __init__(self) -> None:
        # Count, mean and sum of squared deviations from it, merged with Chan et al.'s
        # update: float64 and centred, so large offsets do not cancel the variance.
        self.count = 0
        self.mean = 0.0
        self.m2 = 0.0
        self.num_zeros = 0
        self.min = math.inf
        self.max = -math.inf
        self.finite_min = math.inf
        self.finite_max = -math.inf
        self.pos_inf_count = 0
        self.sketch = _quantiles_sketch()

    def _combine(self, count: int, mean: float, m2: float) -> None:
        if count == 0:
            return
        if self.count == 0:
            self.count, self.mean, self.m2 = count, mean, m2
            return
        total = self.count + count
        delta = mean - self.mean
        self.mean += delta * (count / total)
        self.m2 += m2 + delta * delta * (self.count * (count / total))
        self.count = total

    def add(self, values: np.ndarray) -> None:
        if values.size == 0:
            return
        doubles = values.astype(np.float64, copy=False)
        mean = float(np.mean(doubles))
        self._combine(values.size, mean, float(np.sum(np.square(doubles - mean))))
        low, high = float(np.min(doubles)), float(np.max(doubles))
        self.min, self.max = min(self.min, low), max(self.max, high)
        if not (math.isfinite(low) and math.isfinite(high)):
            self.pos_inf_count += int(np.count_nonzero(np.isposinf(doubles)))
            finite = doubles[np.isfinite(doubles)]
            low, high = (float(finite.min()), float(finite.max())) if finite.size else (
                math.inf, -math.inf)
        self.finite_min, self.finite_max = min(self.finite_min, low), max(self.finite_max, high)
        self.num_zeros += values.size - int(np.count_nonzero(values))
        sample, weights = sketch_sample(values)
        if weights is None:
            self.sketch.AddValues(pa.array(sample))
        else:
            self.sketch.AddValues(pa.array(sample), pa.array(weights))

    def merge(self, other: _Numbers) -> None:
        self._combine(other.count, other.mean, other.m2)
        self.num_zeros += other.num_zeros
        self.min, self.max = min(self.min, other.min), max(self.max, other.max)
        self.finite_min = min(self.finite_min, other.finite_min)
        self.finite_max = max(self.finite_max, other.finite_max)
        self.pos_inf_count += other.pos_inf_count
        self.sketch.Merge(other.sketch)

    def fill(self, result: statistics_pb2.NumericStatistics) -> None:
        """Sets ``result``'s fields but its common stats (TFDV's
        ``_make_numeric_stats_proto``); nothing without values."""
        if self.count == 0:
            return
        result.mean = self.mean
        result.std_dev = math.sqrt(max(0.0, self.m2 / self.count))
        result.num_zeros = self.num_zeros
        result.min, result.max = self.min, self.max
        quantiles, weights = stats_histograms.sketch_quantiles(
            self.sketch, _QUANTILES_FACTOR * NUM_QUANTILES_HISTOGRAM_BUCKETS)
        result.median = stats_histograms.find_median(quantiles)
        result.histograms.append(stats_histograms.equi_width_histogram(
            quantiles, weights, self.finite_min, self.finite_max, NUM_HISTOGRAM_BUCKETS,
            self.pos_inf_count))
        result.histograms.append(stats_histograms.quantiles_histogram(
            *stats_histograms.rebin_quantiles(quantiles, weights, _QUANTILES_FACTOR)))


class _Strings:
    """Lengths, distinct values and value counts of a string feature."""

    def __init__(self) -> None:
        self.total_bytes = 0
        self.top_k = MisraGriesSketch(
            num_buckets=EXACT_COUNT_LIMIT, large_string_threshold=_LARGE_STRING_THRESHOLD,
            large_string_placeholder=_LARGE_BYTES_PLACEHOLDER)
        self.distinct = KmvSketch(KMV_BUCKETS)

    def add(self, values: pa.Array) -> None:
        if len(values) == 0:
            return
        self.total_bytes += pc.sum(pc.binary_length(values)).as_py()
        self.top_k.AddValues(values)
        self.distinct.AddValues(values)

    def merge(self, other: _Strings) -> None:
        self.total_bytes += other.total_bytes
        self.top_k.Merge(other.top_k)
        self.distinct.Merge(other.distinct)

    def fill(self, result: statistics_pb2.StringStatistics, tot_num_values: int) -> None:
        """Sets ``result``'s fields but its common stats (TFDV's basic and top-k
        generators: values by count, then by value, both descending)."""
        if tot_num_values:
            result.avg_length = self.total_bytes / tot_num_values
        counts = sorted(((entry["counts"], entry["values"])
                         for entry in self.top_k.Estimate().to_pylist()), reverse=True)
        if not counts:
            return
        result.unique = self.distinct.Estimate()
        for rank, (count, value) in enumerate(counts[:NUM_RANK_HISTOGRAM_BUCKETS]):
            if count < 1:  # TFDV's frequency_threshold.
                break
            label = value.decode("utf-8", errors="replace")
            if rank < NUM_TOP_VALUES:
                result.top_values.add(value=label, frequency=count)
            result.rank_histogram.buckets.add(
                low_rank=rank, high_rank=rank, label=label, sample_count=count)


class FeatureStatistics:
    """One feature's partial statistics: add, merge, compact, to_proto."""

    def __init__(self, spec: FeatureSpec) -> None:
        self.spec = spec
        self.valency = _Valency()
        self.values: _Numbers | _Strings = _Strings() if spec.kind == STRING else _Numbers()

    def add(self, column: Column) -> None:
        self.valency.add(column)
        self.values.add(column.values)

    def merge(self, other: FeatureStatistics) -> None:
        self.valency.merge(other.valency)
        self.values.merge(other.values)  # type: ignore[arg-type]  # Same kind.

    def compact(self) -> None:
        if self.valency.sketch_entries >= _COMPACT_MIN_VALUES:
            self.valency.sketch.Compact()
        if isinstance(self.values, _Numbers) and self.values.count >= _COMPACT_MIN_VALUES:
            self.values.sketch.Compact()

    def to_proto(self, num_examples: int) -> statistics_pb2.FeatureNameStatistics:
        result = statistics_pb2.FeatureNameStatistics(type=_TYPES[self.spec.kind])
        result.path.step.append(self.spec.name)
        common = self.valency.to_proto(num_examples)
        if isinstance(self.values, _Strings):
            result.string_stats.common_stats.CopyFrom(common)
            self.values.fill(result.string_stats, self.valency.tot_num_values)
        else:
            result.num_stats.common_stats.CopyFrom(common)
            self.values.fill(result.num_stats)
        return result
