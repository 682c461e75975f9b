"""Columns of per-example facts as the statistics sketches take them: the present
values, flat, and how many each example has.

NumPy columns stay NumPy (the time-series job adds ~100k rows at a time, so nothing
loops in Python); Python sequences (the image job's facts, at most a shard's worth)
go through ``pyarrow.array``, which also flattens lists.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

INT, FLOAT, STRING = "int", "float", "string"
KINDS = (INT, FLOAT, STRING)


@dataclasses.dataclass(frozen=True)
class FeatureSpec:
    """A feature of the statistics: its name and kind (INT, FLOAT or STRING)."""

    name: str
    kind: str

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"Feature {self.name!r}: kind must be one of {KINDS}, "
                             f"got {self.kind!r}")


@dataclasses.dataclass(frozen=True)
class Column:
    """One feature's present values in a batch of examples.

    ``values``: a NumPy array (INT, FLOAT) or a pyarrow string array (STRING), without
    missing values; ``counts``: the number of values of each example, or None when
    each example that has the feature has one; ``num_present``: examples with at
    least one value."""

    values: Any
    counts: np.ndarray | None
    num_present: int


def to_column(spec: FeatureSpec, column: Any, num_examples: int) -> Column:
    """``column`` (one entry per example, see ``SplitStatistics.add``) as a Column.

    Raises:
      ValueError: a length other than ``num_examples``, or values of another kind
        (strings for a number, fractions for an INT, bools, bytes).
    """
    if len(column) != num_examples:
        raise ValueError(f"Feature {spec.name!r}: {len(column)} entries for "
                         f"{num_examples} examples")
    if isinstance(column, np.ndarray) and column.dtype.kind in "iuf":
        if column.ndim != 1:
            raise ValueError(f"Feature {spec.name!r}: a NumPy column must be 1-D (one "
                             f"value per example), got shape {column.shape}; pass lists "
                             f"for several values per example")
        return _numpy_column(spec, column)
    try:
        array = pa.array(column, from_pandas=True)  # from_pandas: NaN is a null.
    except (pa.ArrowInvalid, pa.ArrowTypeError) as error:
        raise ValueError(f"Feature {spec.name!r}: cannot read its column as scalars or "
                         f"lists of scalars ({error})") from error
    return _arrow_column(spec, array)


def _numpy_column(spec: FeatureSpec, column: np.ndarray) -> Column:
    if spec.kind == STRING:
        raise ValueError(f"Feature {spec.name!r} is a STRING feature, got numbers "
                         f"({column.dtype})")
    values = column
    if column.dtype.kind == "f":
        present = ~np.isnan(column)
        num_present = int(np.count_nonzero(present))
        if num_present < column.size:
            values = column[present]
    return Column(_checked_numbers(spec, values), None, values.size)


def _arrow_column(spec: FeatureSpec, array: pa.Array) -> Column:
    if pa.types.is_list(array.type) or pa.types.is_large_list(array.type):
        flat = array.flatten()  # Null lists contribute nothing.
        parents = pc.list_parent_indices(array).to_numpy(zero_copy_only=False)
        if flat.null_count:
            parents = parents[flat.is_valid().to_numpy(zero_copy_only=False)]
            flat = flat.drop_null()
        counts = np.bincount(parents, minlength=len(array))
        column = Column(flat, counts, int(np.count_nonzero(counts)))
    elif pa.types.is_nested(array.type):
        raise ValueError(f"Feature {spec.name!r}: entries must be scalars or lists of "
                         f"scalars, got {array.type}")
    else:
        values = array.drop_null()
        column = Column(values, None, len(values))
    return dataclasses.replace(column, values=_checked_values(spec, column.values))


def _checked_values(spec: FeatureSpec, values: pa.Array) -> Any:
    """``values`` as the sketches of ``spec``'s kind take them."""
    kind = values.type
    if spec.kind == STRING:
        if pa.types.is_null(kind):
            return pa.array([], type=pa.string())
        if pa.types.is_string(kind) or pa.types.is_large_string(kind):
            return values
        raise ValueError(f"Feature {spec.name!r} is a STRING feature, got {kind} values "
                         f"(decode bytes, format numbers)")
    if pa.types.is_null(kind):
        return np.zeros(0, dtype=np.float64)
    if not (pa.types.is_integer(kind) or pa.types.is_floating(kind)):
        raise ValueError(f"Feature {spec.name!r} is an {spec.kind.upper()} feature, got "
                         f"{kind} values")
    return _checked_numbers(spec, values.to_numpy(zero_copy_only=False))


def _checked_numbers(spec: FeatureSpec, values: np.ndarray) -> np.ndarray:
    if spec.kind == INT and values.dtype.kind == "f" and not np.array_equal(
            values, np.trunc(values)):
        fractions = values[values != np.trunc(values)]
        raise ValueError(f"Feature {spec.name!r} is an INT feature, got fractions such "
                         f"as {fractions[0]!r}")
    return values
