"""etl/core/transform/exact_stats.py: exact, order-independent moments."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from etl.core.transform import exact_stats


def values(seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(5000, 3)) * np.array([1e-3, 1.0, 1e6]) + np.array([7, -2, 3e6])
    x = x.astype(np.float32)
    x[0] = [0.0, np.float32(1e-42), -np.float32(3e38)]  # zero, subnormal, huge
    return x


def test_moments_do_not_depend_on_order_or_partitioning():
    x = values(1)
    whole = exact_stats.moments_of(x)
    parts = [x[3000:], x[:17], x[17:3000][::-1]]
    merged = exact_stats.merge_all((exact_stats.moments_of(p) for p in parts), 3)
    assert merged == whole
    assert exact_stats.moments_of(x[::-1]) == whole


def test_moments_chunking_matches_single_pass(monkeypatch):
    x = values(2)
    whole = exact_stats.moments_of(x)
    monkeypatch.setattr(exact_stats, "_CHUNK_ROWS", 7)
    assert exact_stats.moments_of(x) == whole


def test_moments_of_nothing_is_zero():
    mean, std = exact_stats.Moments.zeros(2).mean_and_std()
    assert mean.tolist() == [0.0, 0.0] and std.tolist() == [0.0, 0.0]


def test_moments_accept_a_single_column():
    mean, _ = exact_stats.moments_of(np.array([1.0, 2.0, 4.0], np.float32)).mean_and_std()
    assert mean.tolist() == pytest.approx([7 / 3])


def test_moments_mean_and_std_round_the_exact_variance_once():
    x = values(3)
    mean, std = exact_stats.moments_of(x).mean_and_std()
    for c in range(x.shape[1]):
        column = [Fraction(float(v)) for v in x[:, c]]
        exact_mean = sum(column) / len(column)
        exact_var = sum(v * v for v in column) / len(column) - exact_mean ** 2
        assert mean[c] == np.float32(float(exact_mean))
        assert std[c] == np.float32(np.sqrt(float(exact_var)))


def test_moments_std_of_float32_extremes_is_finite():
    # The variance (~1e77) overflows float32; the standard deviation does not.
    x = np.array([[3e38], [-3e38]], np.float32)
    _, std = exact_stats.moments_of(x).mean_and_std()
    assert std[0] == np.float32(3e38)


def test_moments_bytes_round_trip_exactly():
    moments = exact_stats.moments_of(values(4))
    assert exact_stats.Moments.from_bytes(moments.to_bytes()) == moments
