"""Order-independent mean and variance: exact integer sums of float32 values.

Floating-point sums depend on the order of additions, and Beam (and tf.Transform's
adaptive batching) add in an order that changes with every execution and worker
count, so float statistics would differ in the last bits, and with them every
normalised value.
Every float32 is ``M * 2**E`` with an integer ``|M| < 2**24``; summing ``M`` and
``M**2`` as integers per exponent gives the exact sums, which merge by plain
integer addition. Mean and standard deviation are then rounded from exact
rationals, so they are identical for any partitioning of the data.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Iterable
from fractions import Fraction

import apache_beam as beam
import numpy as np

# float32 values are M * 2**E with E >= -172 (subnormals: 2**-149 = 2**23 * 2**-172).
_MIN_EXPONENT = -172
# Per exponent bucket, int64 holds 2**15 squared mantissas (< 2**48) without overflow.
_CHUNK_ROWS = 1 << 15


@dataclasses.dataclass
class Moments:
    """Exact per-column count, sum and sum of squares (scaled integers)."""

    count: int
    sums: list[int]  # sum of x, in units of 2**_MIN_EXPONENT
    squares: list[int]  # sum of x*x, in units of 2**(2 * _MIN_EXPONENT)

    @classmethod
    def zeros(cls, num_columns: int) -> Moments:
        return cls(0, [0] * num_columns, [0] * num_columns)

    def merge(self, other: Moments) -> Moments:
        return Moments(self.count + other.count,
                       [a + b for a, b in zip(self.sums, other.sums, strict=True)],
                       [a + b for a, b in zip(self.squares, other.squares, strict=True)])

    def mean_and_std(self) -> tuple[np.ndarray, np.ndarray]:
        """Population mean and standard deviation per column as float32.

        The standard deviation is the square root of the exact variance rounded to
        float64, so it stays finite for any float32 data (a float32 variance
        overflows beyond ~1.8e19 spreads). An empty accumulator gives 0 and 0.
        """
        if self.count == 0:
            zeros = np.zeros(len(self.sums), np.float32)
            return zeros, zeros.copy()
        means, stds = [], []
        for total, squares in zip(self.sums, self.squares, strict=True):
            mean = Fraction(total, self.count) * Fraction(2) ** _MIN_EXPONENT
            second = Fraction(squares, self.count) * Fraction(2) ** (2 * _MIN_EXPONENT)
            means.append(float(mean))
            stds.append(math.sqrt(float(second - mean * mean)))
        return np.array(means, np.float32), np.array(stds, np.float32)

    def to_bytes(self) -> bytes:
        """A compact, exact text form (``from_bytes`` reads it back)."""
        return json.dumps([self.count, self.sums, self.squares]).encode()

    @classmethod
    def from_bytes(cls, data: bytes) -> Moments:
        count, sums, squares = json.loads(data)
        return cls(count, sums, squares)


def _bucket_sums(mantissas: np.ndarray, exponents: np.ndarray) -> list[int]:
    """Exact sum of ``mantissas * 2**exponents`` (exponents >= 0) as a Python int."""
    buckets = np.zeros(int(exponents.max(initial=0)) + 1, np.int64)
    np.add.at(buckets, exponents, mantissas)
    return sum(int(b) << int(e) for e, b in enumerate(buckets) if b)


def moments_of(values: np.ndarray) -> Moments:
    """Exact moments of a ``[rows, columns]`` float32 array (finite values)."""
    values = np.asarray(values, np.float32)
    if values.ndim == 1:
        values = values[:, None]
    columns = values.shape[1]
    result = Moments.zeros(columns)
    for start in range(0, len(values), _CHUNK_ROWS):
        chunk = values[start:start + _CHUNK_ROWS].astype(np.float64)
        fraction, exponent = np.frexp(chunk)  # chunk = fraction * 2**exponent
        mantissa = (fraction * (1 << 24)).astype(np.int64)  # exact for float32
        shift = exponent.astype(np.int64) - 24 - _MIN_EXPONENT  # >= 0
        sums = [_bucket_sums(mantissa[:, c], shift[:, c]) for c in range(columns)]
        squares = [_bucket_sums(mantissa[:, c] * mantissa[:, c], 2 * shift[:, c])
                   for c in range(columns)]
        result = result.merge(Moments(len(chunk), sums, squares))
    return result


def merge_all(parts: Iterable[Moments], num_columns: int) -> Moments:
    total = Moments.zeros(num_columns)
    for part in parts:
        total = total.merge(part)
    return total


class MomentsCombineFn(beam.CombineFn):
    """Beam CombineFn over ``Moments``: exact, so any merge order gives the same."""

    def __init__(self, num_columns: int) -> None:
        self._num_columns = num_columns

    def create_accumulator(self) -> Moments:
        return Moments.zeros(self._num_columns)

    def add_input(self, accumulator: Moments, element: Moments) -> Moments:
        return accumulator.merge(element)

    def merge_accumulators(self, accumulators: Iterable[Moments]) -> Moments:
        return merge_all(accumulators, self._num_columns)

    def extract_output(self, accumulator: Moments) -> Moments:
        return accumulator
