"""TFDV's histograms from a quantiles sketch's boundaries and cumulative weights.

A port of ``tensorflow_data_validation/utils/quantiles_util.py`` (Apache 2.0,
tensorflow/data-validation @ 710b32fae04f) kept bucket for bucket, so that our
statistics hold the histograms TFDV would compute from the same sketch: its drift
comparators and Facets read these very buckets. Only the bookkeeping differs: the
interpolation runs on NumPy arrays, not on the buckets of an intermediate proto.

Boundaries and weights come from ``QuantilesSketch.GetQuantilesAndCumulativeWeights``:
``q[0] <= q[1] <= ...`` with ``cw[i]`` the weight of the values ``<= q[i]``. A bucket
holds the values in ``(q[i-1], q[i]]``, the first also those equal to ``q[0]``.
"""

from __future__ import annotations

import pickle

import numpy as np
from tensorflow_metadata.proto.v0 import statistics_pb2
from tfx_bsl.sketches import QuantilesSketch

Histogram = statistics_pb2.Histogram


def sketch_quantiles(sketch: QuantilesSketch, num_quantiles: int
                     ) -> tuple[np.ndarray, np.ndarray]:
    """(``num_quantiles + 1`` boundaries, their cumulative weights) from a copy of
    ``sketch``: reading quantiles finalizes a sketch, which then neither merges nor
    pickles."""
    copy = pickle.loads(pickle.dumps(sketch))
    quantiles, weights = copy.GetQuantilesAndCumulativeWeights(num_quantiles)
    return (quantiles.flatten().to_numpy(zero_copy_only=False),
            weights.flatten().to_numpy(zero_copy_only=False))


def find_median(quantiles: np.ndarray) -> float:
    """The middle boundary, or the mean of the two middle ones for an even count."""
    middle = len(quantiles) // 2
    if len(quantiles) % 2 == 0:
        return float((quantiles[middle - 1] + quantiles[middle]) / 2.0)
    return float(quantiles[middle])


def bin_weights(boundaries: np.ndarray, cumulative_weights: np.ndarray
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(low bounds, high bounds, weights) of the bins between consecutive boundaries.

    The weight of bins sharing an upper bound is spread evenly over them, and the
    weight at the lowest boundary (``cumulative_weights[0]``) evenly over the leading
    bins identical to the first (TFDV's ``_get_bin_weights``)."""
    cumulative_weights = np.asarray(cumulative_weights, dtype=np.float64)
    low, high = boundaries[:-1], boundaries[1:]
    weights = np.diff(cumulative_weights)
    start = 0
    while start < low.size:
        end = start + 1
        while end < low.size and high[end] == high[start]:
            end += 1
        if end > start + 1:
            weights[start:end] = weights[start:end].sum() / (end - start)
        start = end
    leading = 0
    while leading < low.size and low[leading] == low[0] and high[leading] == high[0]:
        leading += 1
    if leading > 0:
        weights[:leading] += cumulative_weights[0] / leading
    return low, high, weights


def rebin_quantiles(quantiles: np.ndarray, cumulative_weights: np.ndarray,
                    reduction_factor: int) -> tuple[np.ndarray, np.ndarray]:
    """Every ``reduction_factor``-th boundary (and the first), with its weight."""
    if (cumulative_weights.size - 1) % reduction_factor:
        raise ValueError(f"Reduction factor {reduction_factor} must divide size "
                         f"{cumulative_weights.size - 1}")
    return (np.concatenate([quantiles[:1], quantiles[reduction_factor::reduction_factor]]),
            np.concatenate([cumulative_weights[:1],
                            cumulative_weights[reduction_factor::reduction_factor]]))


def quantiles_histogram(quantiles: np.ndarray, cumulative_weights: np.ndarray
                        ) -> statistics_pb2.Histogram:
    """A QUANTILES histogram: one bucket between each pair of consecutive boundaries."""
    result = Histogram(type=Histogram.QUANTILES)
    for low, high, weight in zip(*bin_weights(quantiles, cumulative_weights), strict=True):
        result.buckets.add(low_value=low, high_value=high, sample_count=weight)
    return result


def _strip_infinities(quantiles: np.ndarray, cumulative_weights: np.ndarray,
                      finite_max: float, num_pos_inf: float
                      ) -> tuple[np.ndarray, np.ndarray, float]:
    """Boundaries and weights without the bins bounded by +-inf, and the -inf weight."""
    neg_inf_index = int(np.searchsorted(quantiles, float("-inf"), side="right"))
    num_neg_inf = 0.0
    if neg_inf_index:
        # Boundaries are upper bounds: the bins ending at -inf hold only -inf.
        num_neg_inf = cumulative_weights[neg_inf_index - 1]
        quantiles = quantiles[neg_inf_index:]
        cumulative_weights = cumulative_weights[neg_inf_index:] - num_neg_inf
    if num_pos_inf:
        # A bin ending at +inf may hold finite values too: it ends at the finite max
        # with all but the +inf weight.
        pos_inf_index = int(np.searchsorted(quantiles, float("inf"), side="left"))
        finite_weight = cumulative_weights[-1] - num_pos_inf
        quantiles = np.concatenate([quantiles[:pos_inf_index], [finite_max]])
        cumulative_weights = np.concatenate(
            [cumulative_weights[:pos_inf_index], [finite_weight]])
    return quantiles, cumulative_weights, num_neg_inf


def _overlap(low: float, high: float, low_bound: float, high_bound: float,
             first: bool) -> tuple[float, bool, bool]:
    """(fraction of the bin [low, high] inside [low_bound, high_bound], whether the bin
    precedes the interval, whether it follows it), values uniform within the bin; a
    point bin on the left edge belongs to the ``first`` interval only."""
    if high == low == low_bound:
        return (1.0, False, False) if first else (0.0, True, False)
    if high < low_bound:
        return 0.0, True, False
    if low > high_bound:
        return 0.0, False, True
    if low_bound <= low and high_bound >= high:
        return 1.0, False, False
    if low_bound <= low:
        return (high_bound - low) / (high - low), False, False
    if high_bound >= high:
        return (high - low_bound) / (high - low), False, False
    if low_bound > low and high_bound < high:
        return (high_bound - low_bound) / (high - low), False, False
    raise ValueError(f"Unable to compute overlap between ({low_bound}, {high_bound}) "
                     f"and [{low}, {high}]")


def _interval_weights(bins: tuple[np.ndarray, np.ndarray, np.ndarray],
                      boundaries: np.ndarray) -> list[float]:
    """The weight of each interval between ``boundaries``, interpolated from ``bins``."""
    lows, highs, weights = (array.tolist() for array in bins)
    result = []
    start = 0
    for i in range(boundaries.size - 1):
        low_bound, high_bound = float(boundaries[i]), float(boundaries[i + 1])
        total = 0.0
        for index in range(start, len(lows)):
            fraction, precedes, follows = _overlap(
                lows[index], highs[index], low_bound, high_bound, first=i == 0)
            if follows:
                break
            if precedes:
                start = index
            total += fraction * weights[index]
        result.append(total)
    return result


def equi_width_histogram(quantiles: np.ndarray, cumulative_weights: np.ndarray,
                         finite_min: float, finite_max: float, num_buckets: int,
                         num_pos_inf: float) -> statistics_pb2.Histogram:
    """A STANDARD histogram: ``num_buckets`` equal-width buckets over
    ``[finite_min, finite_max]`` (one when they are equal), each bucket's weight
    interpolated linearly from the quantile bins; the -inf and +inf weights as
    leading and trailing point buckets. Empty if the bounds overflow."""
    result = Histogram(type=Histogram.STANDARD)
    if not np.isfinite(finite_min) and not np.isfinite(finite_max):
        result.buckets.add(low_value=finite_min, high_value=finite_max,
                           sample_count=cumulative_weights[-1])
        return result
    quantiles, cumulative_weights, num_neg_inf = _strip_infinities(
        quantiles, cumulative_weights, finite_max, num_pos_inf)
    if finite_min == finite_max:
        boundaries = np.array([finite_min, finite_max], dtype=np.float64)
    else:
        with np.errstate(over="ignore", invalid="ignore"):  # Checked just below.
            boundaries = np.linspace(finite_min, finite_max, num_buckets + 1)
        if not np.isfinite(boundaries).all():
            return result  # The range overflows float64: no meaningful buckets.
    if num_neg_inf:
        result.buckets.add(low_value=float("-inf"), high_value=float("-inf"),
                           sample_count=num_neg_inf)
    weights = _interval_weights(bin_weights(quantiles, cumulative_weights), boundaries)
    for low, high, weight in zip(boundaries[:-1], boundaries[1:], weights, strict=True):
        result.buckets.add(low_value=low, high_value=high, sample_count=weight)
    if num_pos_inf:
        result.buckets.add(low_value=float("inf"), high_value=float("inf"),
                           sample_count=num_pos_inf)
    return result
