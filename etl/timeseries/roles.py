"""Column roles: what each real column of a forecasting row is to the model.

Forecasters separate the columns of a row by what is known when (pytorch-forecasting,
GluonTS, Darts, the Temporal Fusion Transformer): the **targets** are predicted; the
**past** covariates are observed, so a model sees them in the window only; the
**known** covariates (prices, promotions, holidays) are known in advance, so a model
sees them over the window *and* the horizon; the **static** columns are one value per
series. Calendar features, derived from the timestamps, are known covariates too.
Categorical columns (known over window and horizon, or static) are text, mapped to
ids by tf.Transform vocabularies fit on train rows.

Every real column is parsed, cleaned and summed like a value column, in one order,
``ColumnRoles.reals``: targets, past, known, static reals; the categorical columns
follow them in a row's values (``ColumnRoles.categoricals``), as codes the series
step maps back to their texts. The blocks stored per window (docs/TIMESERIES_JOB.md,
"Covariates"):

* ``window`` ``[W, T + P]``: targets, then past columns, over the window;
* ``target`` ``[H, T]``: the targets over the horizon;
* ``known`` ``[W + H, K + C]``: known reals, then calendar features, over both;
* ``known_cat`` ``[W + H, Kc]``: known categoricals' vocabulary ids, over both;
* ``static_cat`` ``[Sc]``: the series' static categoricals' ids, once per window;
* ``static_real`` ``[Sr]``: the series' static reals, once per window;
* ``target_scale`` ``[T, 2]``: (centre, scale) of each target, to return predictions
  to real units.

With no role flag given (``given`` False) the targets are the value columns and the
job writes the single-role layout: every real column in ``window`` ``[W, F]`` and,
forecasting, in ``target`` ``[H, F]``; no covariate block.
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Sequence

from etl.timeseries import calendar

# --target_transform: applied to the targets before they are scaled (and inverted after).
TARGET_TRANSFORMS = ("none", "log1p")


@dataclasses.dataclass(frozen=True)
class ColumnRoles:
    """The real columns by role, in flag order, and what is derived or applied."""

    targets: tuple[str, ...]
    past: tuple[str, ...] = ()
    known: tuple[str, ...] = ()
    static_real: tuple[str, ...] = ()
    known_categorical: tuple[str, ...] = ()
    static_categorical: tuple[str, ...] = ()
    calendar: tuple[str, ...] = ()
    target_transform: str = "none"
    given: bool = False  # a role flag was given: the covariate layout
    # The flag the user named the targets with (--value_columns is another name).
    targets_flag: str = "--target_columns"

    def __post_init__(self) -> None:
        if not self.targets:
            raise ValueError(f"{self.targets_flag} names no column.")
        seen: dict[str, str] = {}
        for role, names in self.named_columns().items():
            for name in names:
                if name in seen:
                    raise ValueError(f"Column {name!r} is in both {seen[name]} and "
                                     f"{role}; give each column one role.")
                seen[name] = role
        unknown = [f for f in self.calendar if f not in calendar.FEATURES]
        if unknown:
            raise ValueError(f"--calendar_features: unknown {unknown}; choose from "
                             f"{list(calendar.FEATURES)}.")
        if len(set(self.calendar)) != len(self.calendar):
            raise ValueError(f"--calendar_features names a feature twice: "
                             f"{list(self.calendar)}.")
        if self.target_transform not in TARGET_TRANSFORMS:
            raise ValueError(f"--target_transform must be one of {TARGET_TRANSFORMS}, "
                             f"got {self.target_transform!r}.")

    def named_columns(self) -> dict[str, tuple[str, ...]]:
        """Each role's flag → the columns it names, in row order."""
        return {self.targets_flag: self.targets, "--past_columns": self.past,
                "--known_columns": self.known, "--static_real_columns": self.static_real,
                "--known_categorical_columns": self.known_categorical,
                "--static_categorical_columns": self.static_categorical}

    @property
    def reals(self) -> tuple[str, ...]:
        """Every real column, in the order rows hold them."""
        return self.targets + self.past + self.known + self.static_real

    @property
    def categoricals(self) -> tuple[str, ...]:
        """Every categorical column, in the order rows hold them (after ``reals``)."""
        return self.known_categorical + self.static_categorical

    @property
    def num_columns(self) -> int:
        """Values per parsed row: the reals, then the categoricals' codes."""
        return len(self.reals) + len(self.categoricals)

    @property
    def categorical_columns(self) -> range:
        """Indices (in a row's values) of every categorical."""
        return range(len(self.reals), self.num_columns)

    @property
    def known_cat_columns(self) -> range:
        """Indices (in a row's values) of the known categoricals."""
        start = len(self.reals)
        return range(start, start + len(self.known_categorical))

    @property
    def static_cat_columns(self) -> range:
        """Indices (in a row's values) of the static categoricals."""
        start = len(self.reals) + len(self.known_categorical)
        return range(start, start + len(self.static_categorical))

    def vocabularies(self) -> list[tuple[str, str]]:
        """``(column, vocabulary name)`` of every categorical, in row order: the
        tf.Transform vocabulary file names (``known_cat_0``, ``static_cat_0``, ...)."""
        return ([(name, f"known_cat_{k}") for k, name in enumerate(self.known_categorical)]
                + [(name, f"static_cat_{k}")
                   for k, name in enumerate(self.static_categorical)])

    @property
    def num_window_columns(self) -> int:
        return len(self.targets) + len(self.past)

    @property
    def known_slice(self) -> slice:
        start = self.num_window_columns
        return slice(start, start + len(self.known))

    @property
    def static_slice(self) -> slice:
        start = self.num_window_columns + len(self.known)
        return slice(start, start + len(self.static_real))

    @property
    def num_known_channels(self) -> int:
        return len(self.known) + len(self.calendar)

    @property
    def missing_policy_columns(self) -> tuple[int, ...]:
        """Indices (in ``reals``) of the columns ``--missing`` applies to."""
        return tuple(range(self.num_window_columns))

    def channels(self) -> dict[str, list[str]]:
        """Each stored block's channels, in order (for the manifest)."""
        blocks = {"window": [*self.targets, *self.past], "target": list(self.targets)}
        if self.num_known_channels:
            blocks["known"] = [*self.known, *(f"calendar:{f}" for f in self.calendar)]
        if self.known_categorical:
            blocks["known_cat"] = list(self.known_categorical)
        if self.static_categorical:
            blocks["static_cat"] = list(self.static_categorical)
        if self.static_real:
            blocks["static_real"] = list(self.static_real)
        blocks["target_scale"] = ["centre", "scale"]
        return blocks


def closest(name: str, names: Sequence[str]) -> str:
    """`` (closest: 'x')`` for the most similar of ``names``, or ``""``."""
    match = difflib.get_close_matches(name, list(names), n=1, cutoff=0.5)
    return f" (closest: {match[0]!r})" if match else ""
