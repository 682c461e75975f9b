"""Drift between two splits' statistics, measured as TFDV measures it.

    from reader.stats import drift
    from reader.stats import files as stats_files

    per_split = stats_files.read_split_statistics("out/images")
    entries = drift.compare(per_split["train"], per_split["test"],
                            split="test", baseline="train")
    [e for e in entries if e["over"]]     # what moved more than its threshold

Comparators ported from TFDV's ``anomalies/metrics.cc`` (tensorflow/data-validation
@ 710b32fae04f), checked against its ``metrics_test.cc`` golden values:

- ``infinity_norm`` (L∞, ``LInftyDistance``): the largest difference between the
  two sides' value shares in ``string_stats.rank_histogram``, each side normalized
  by its own total.
- ``jensen_shannon_divergence`` (``JensenShannonDivergence``): base-2 JSD capped at
  1, of the two rank histograms if both sides have one, else of the two numeric
  histograms of one type (``compare``: ``DRIFT_HISTOGRAM``) after ``AlignHistograms``:
  infinite-bound buckets become one mass per side, zero-width ones a point mass per
  value, the rest is rebucketed onto the union of both sides' boundaries (uniform
  within a bucket); NaN counts a bucket that never matches the other side.

``COMPARATOR_OF_TYPE``: L∞ for STRING features, as TFDV's documentation configures
drift on categorical features (it also names the value that moved most); JSD for
INT and FLOAT features, TFDV's only numeric drift measure. TFDV documents no default
threshold; ours, and why, are in docs/KNOW_YOUR_DATA.md.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from tensorflow_metadata.proto.v0 import statistics_pb2

from reader.stats.files import feature_name

INFINITY_NORM = "infinity_norm"
JENSEN_SHANNON_DIVERGENCE = "jensen_shannon_divergence"
# A feature listed in only one side's statistics: reported with distance None and
# over True (TFDV: COMPARATOR_CONTROL_DATA_MISSING / _TREATMENT_DATA_MISSING).
MISSING_IN_BASELINE = "missing_in_baseline"
MISSING_IN_SPLIT = "missing_in_split"
# Fewer examples on a side than this, and a distance says more about the sample than
# the data: a clean split of 50 scores JSD up to 0.13 (docs/KNOW_YOUR_DATA.md).
MIN_EXAMPLES = 100

# comparator → threshold; a comparator absent here is not computed.
DEFAULT_THRESHOLDS: Mapping[str, float] = {INFINITY_NORM: 0.1, JENSEN_SHANNON_DIVERGENCE: 0.15}
# The baseline's feature type → the comparator that measures it.
COMPARATOR_OF_TYPE: Mapping[int, str] = {
    statistics_pb2.FeatureNameStatistics.STRING: INFINITY_NORM,
    statistics_pb2.FeatureNameStatistics.INT: JENSEN_SHANNON_DIVERGENCE,
    statistics_pb2.FeatureNameStatistics.FLOAT: JENSEN_SHANNON_DIVERGENCE,
}

_Histogram = statistics_pb2.Histogram
# TFDV's QUANTILES (``source: QUANTILES``): equal-width buckets span each side's own
# range, so a few outliers in one split, or a constant (every photo 4:3), move every
# bucket (JSD 1.0 between two splits of the same photos).
DRIFT_HISTOGRAM = _Histogram.QUANTILES


def string_counts(feature: statistics_pb2.FeatureNameStatistics) -> dict[str, float]:
    """``{value: count}`` of the rank histogram (a repeated label keeps its first)."""
    counts: dict[str, float] = {}
    for bucket in feature.string_stats.rank_histogram.buckets:
        counts.setdefault(bucket.label, bucket.sample_count)
    return counts


def _total(values: Iterable[float]) -> float:
    """A left-to-right sum, as TFDV's C++ adds (Python 3.12's ``sum`` compensates)."""
    total = 0.0
    for value in values:
        total += value
    return total


def _normalize(counts: Mapping[str, float]) -> dict[str, float]:
    """TFDV's ``Normalize`` of a ``std::map``: summed in key order."""
    total = _total(counts[k] for k in sorted(counts))
    return dict(counts) if total == 0 else {k: v / total for k, v in counts.items()}


def linf_distance(control: statistics_pb2.FeatureNameStatistics,
                  treatment: statistics_pb2.FeatureNameStatistics) -> tuple[str, float]:
    """L∞ distance of the two rank histograms and the value where it is reached.

    A side without a rank histogram counts as no values (a numeric feature: 0.0).

    Returns:
        ``(value, distance)``; on a tie the value last in sorted order, as TFDV.
    """
    difference = _normalize(string_counts(treatment))
    for value, share in _normalize(string_counts(control)).items():
        difference[value] = difference.get(value, 0.0) - share
    best = ("", 0.0)
    for value in sorted(difference):
        if abs(difference[value]) >= best[1]:
            best = (value, abs(difference[value]))
    return best


def jensen_shannon_divergence(
        control: statistics_pb2.FeatureNameStatistics,
        treatment: statistics_pb2.FeatureNameStatistics,
        histogram_type: int = _Histogram.STANDARD) -> float:
    """TFDV's approximate Jensen–Shannon divergence (base 2, capped at 1).

    Raises:
        ValueError: TFDV's InvalidArgument cases, where it skips the comparator: one
            side categorical and the other numeric, a side with no histogram or an
            empty one, a non-positive rank-histogram count.
    """
    counts_1, counts_2 = string_counts(treatment), string_counts(control)
    if counts_1 and counts_2:
        return _categorical_jsd(counts_1, counts_2)
    histogram_1 = _histogram(treatment, histogram_type)
    histogram_2 = _histogram(control, histogram_type)
    if histogram_1 is not None and histogram_2 is not None:
        return _jsd(*align_histograms(histogram_1, histogram_2))
    if bool(counts_1) != bool(counts_2) and (histogram_1 is None) != (histogram_2 is None):
        raise ValueError("Input statistics must be either both numeric or both string "
                         "in order to calculate the Jensen-Shannon divergence.")
    raise ValueError("One or more feature missing data.")


def _histogram(feature: statistics_pb2.FeatureNameStatistics,
               histogram_type: int) -> statistics_pb2.Histogram | None:
    if not feature.HasField("num_stats"):
        return None
    return next((h for h in feature.num_stats.histograms if h.type == histogram_type), None)


def _categorical_jsd(counts_1: Mapping[str, float], counts_2: Mapping[str, float]) -> float:
    if any(c <= 0 for c in (*counts_1.values(), *counts_2.values())):
        raise ValueError("Sample count is a non-positive value.")
    sum_1 = _total(counts_1[k] for k in sorted(counts_1))
    sum_2 = _total(counts_2[k] for k in sorted(counts_2))
    kl_sum = 0.0
    for value in sorted(set(counts_1) | set(counts_2)):
        p, q = counts_1.get(value, 0.0) / sum_1, counts_2.get(value, 0.0) / sum_2
        m = (p + q) / 2
        if p != 0:
            kl_sum += p * math.log2(p / m)
        if q != 0:
            kl_sum += q * math.log2(q / m)
    return min(kl_sum / 2, 1.0)


def _strip(histogram: statistics_pb2.Histogram
           ) -> tuple[list[tuple[float, float, float]], dict[float, float], float]:
    """``StripPointAndInfiniteBuckets``: (finite buckets, point masses, infinite mass)."""
    buckets, points, infinite = [], {}, 0.0
    for b in histogram.buckets:
        if not (math.isfinite(b.low_value) and math.isfinite(b.high_value)):
            infinite += b.sample_count
        elif b.low_value == b.high_value:
            points[b.low_value] = points.get(b.low_value, 0.0) + b.sample_count
        else:
            buckets.append((b.low_value, b.high_value, b.sample_count))
    return buckets, points, infinite


def _rebucket(boundaries: Sequence[float],
              buckets: Sequence[tuple[float, float, float]]) -> list[float]:
    """``RebucketHistogram``: counts on ``boundaries`` (which hold every bucket bound),
    each bucket's count spread in proportion to width; empty where none was."""
    counts, index = [], 0
    for low, high, count in buckets:
        while low > boundaries[index]:
            counts.append(0.0)
            index += 1
        start = index
        while high > boundaries[index]:
            index += 1
        counts.extend((boundaries[i + 1] - boundaries[i]) / (high - low) * count
                      for i in range(start, index))
    counts.extend(0.0 for _ in range(index, len(boundaries) - 1))
    return counts


def align_histograms(histogram_1: statistics_pb2.Histogram,
                     histogram_2: statistics_pb2.Histogram) -> tuple[list[float], list[float]]:
    """TFDV's ``AlignHistograms``: two count vectors over the same buckets.

    Quirk kept from TFDV: rebucketing builds new histograms without ``num_nan``, so
    NaN counts enter only when both sides have the same finite boundaries.
    """
    buckets_1, points_1, infinite_1 = _strip(histogram_1)
    buckets_2, points_2, infinite_2 = _strip(histogram_2)
    bounds_1 = {x for low, high, _ in buckets_1 for x in (low, high)}
    bounds_2 = {x for low, high, _ in buckets_2 for x in (low, high)}
    nan_1, nan_2 = histogram_1.num_nan, histogram_2.num_nan
    if bounds_1 != bounds_2:
        boundaries = sorted(bounds_1 | bounds_2)
        counts_1, counts_2 = _rebucket(boundaries, buckets_1), _rebucket(boundaries, buckets_2)
        nan_1 = nan_2 = 0
    else:
        counts_1, counts_2 = [b[2] for b in buckets_1], [b[2] for b in buckets_2]
    for point in sorted(set(points_1) | set(points_2)):
        counts_1.append(points_1.get(point, 0.0))
        counts_2.append(points_2.get(point, 0.0))
    # Infinite and NaN masses go in buckets that never match the other side's.
    if infinite_1 != 0:
        counts_1.append(infinite_1)
        counts_2.append(0.0)
    if infinite_2 != 0:
        counts_1.append(0.0)
        counts_2.append(infinite_2)
    if nan_1 > 0 or nan_2 > 0:
        counts_1.extend((0.0, float(nan_1)))
        counts_2.extend((float(nan_2), 0.0))
    return counts_1, counts_2


def _jsd(counts_1: Sequence[float], counts_2: Sequence[float]) -> float:
    """JSD of two aligned count vectors (TFDV: normalize, KL to the mean, cap 1)."""
    total_1, total_2 = _total(counts_1), _total(counts_2)
    if total_1 == 0 or total_2 == 0:
        raise ValueError("Unable to normalize an empty histogram")
    p = [c / total_1 for c in counts_1]
    q = [c / total_2 for c in counts_2]
    m = [(a + b) / 2 for a, b in zip(p, q, strict=True)]
    return min((_kl(p, m) + _kl(q, m)) / 2, 1.0)


def _kl(p: Sequence[float], q: Sequence[float]) -> float:
    return _total(a * math.log2(a / b) for a, b in zip(p, q, strict=True) if a > 0 and b > 0)


def _has_data(feature: statistics_pb2.FeatureNameStatistics) -> bool:
    histogram = _histogram(feature, _Histogram.STANDARD)
    return bool(string_counts(feature)) or (histogram is not None and (
        histogram.num_nan > 0 or any(b.sample_count for b in histogram.buckets)))


def _round6(x: float) -> float:
    """Six significant digits (TFDV's ``absl::SixDigits``), so JSON is stable."""
    return float(f"{x:.6g}")


def _entry(split: str, baseline: str, feature: str, comparator: str,
           distance: float | None, threshold: float | None, over: bool) -> dict[str, Any]:
    return {"split": split, "baseline": baseline, "feature": feature,
            "comparator": comparator, "distance": distance, "threshold": threshold,
            "over": over}


def _measure(name: str, control: statistics_pb2.FeatureNameStatistics | None,
             treatment: statistics_pb2.FeatureNameStatistics | None,
             where: tuple[str, str], thresholds: Mapping[str, float]) -> list[dict[str, Any]]:
    """The entries of one feature (none when no comparator of ``thresholds`` applies)."""
    if control is None or treatment is None:
        missing = MISSING_IN_BASELINE if control is None else MISSING_IN_SPLIT
        return [_entry(*where, name, missing, None, None, True)]
    comparator = COMPARATOR_OF_TYPE.get(control.type)
    if comparator not in thresholds:
        return []
    threshold = float(thresholds[comparator])
    try:
        distance = _round6(linf_distance(control, treatment)[1]
                           if comparator == INFINITY_NORM
                           else jensen_shannon_divergence(control, treatment,
                                                          DRIFT_HISTOGRAM))
    except ValueError:
        # No histogram to compare on a side (every value missing, or NaN on one side
        # only): over when either side has data, as a vanished feature would be.
        return [_entry(*where, name, comparator, None, threshold,
                       _has_data(control) or _has_data(treatment))]
    # ``over`` is judged on the rounded distance, so the file agrees with itself.
    return [_entry(*where, name, comparator, distance, threshold, distance > threshold)]


def _by_name(dataset: statistics_pb2.DatasetFeatureStatistics | None
             ) -> dict[str, statistics_pb2.FeatureNameStatistics]:
    """Features by name; a repeated name keeps its first statistics."""
    result: dict[str, statistics_pb2.FeatureNameStatistics] = {}
    for feature in dataset.features if dataset is not None else ():
        result.setdefault(feature_name(feature), feature)
    return result


def compare(control: statistics_pb2.DatasetFeatureStatistics,
            treatment: statistics_pb2.DatasetFeatureStatistics, *, split: str,
            baseline: str, thresholds: Mapping[str, float] = DEFAULT_THRESHOLDS,
            features: Iterable[str] | None = None, min_examples: int = MIN_EXAMPLES
            ) -> list[dict[str, Any]]:
    """Drift of ``treatment`` (split ``split``) from ``control`` (``baseline``, e.g.
    ``"train"`` or ``"v00001/train"``), for ``features`` (default: all); a
    comparator absent from ``thresholds`` is skipped.

    Returns one entry per feature and comparator, in :func:`sort_entries` order:
    ``{"split", "baseline", "feature", "comparator", "distance", "threshold",
    "over", "judged"}``; ``distance`` rounded to 6 significant digits, ``over`` is
    ``distance > threshold``. A feature listed on one side only gets comparator
    ``missing_in_baseline`` or ``missing_in_split``, distance and threshold None,
    over True. A distance TFDV cannot compute (no histogram on a side) is None, over
    when either side has values. With fewer than ``min_examples`` on a side, the
    distances are noise (docs/KNOW_YOUR_DATA.md): they are given, ``judged`` is
    False and nothing is over.
    """
    sides = [_by_name(control), _by_name(treatment)]
    names = set(sides[0]) | set(sides[1])
    if features is not None:
        names &= set(features)
    judged = min(control.num_examples, treatment.num_examples) >= min_examples
    entries = [{**entry, "over": entry["over"] and judged, "judged": judged}
               for name in sorted(names)
               for entry in _measure(name, sides[0].get(name), sides[1].get(name),
                                     (split, baseline), thresholds)]
    return sort_entries(entries)


def sort_entries(entries: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Over first, then by split, baseline, feature and comparator."""
    return sorted((dict(e) for e in entries), key=lambda e: (
        not e["over"], e["split"], e["baseline"], e["feature"], e["comparator"]))
