"""Deterministic train / validation / test assignment from a stable hash of the key."""

from __future__ import annotations

import dataclasses
import math

from etl.core import hashing
from reader.format import contract

# Folder or column values accepted as an explicit split, mapped to the canonical name.
SPLIT_ALIASES: dict[str, str] = {
    "train": contract.TRAIN,
    "training": contract.TRAIN,
    "validation": contract.VALIDATION,
    "valid": contract.VALIDATION,
    "val": contract.VALIDATION,
    "test": contract.TEST,
    "testing": contract.TEST,
}


@dataclasses.dataclass(frozen=True)
class SplitFractions:
    """Fractions of examples hashed into each split; they must sum to 1."""

    train: float = 0.8
    validation: float = 0.1
    test: float = 0.1

    def __post_init__(self) -> None:
        values = (self.train, self.validation, self.test)
        if (not all(math.isfinite(v) and v >= 0 for v in values)
                or abs(sum(values) - 1.0) > 1e-9):
            raise ValueError(
                f"Split fractions must be >= 0 and sum to 1, got train={self.train}, "
                f"validation={self.validation}, test={self.test}."
            )

    @classmethod
    def parse(cls, text: str) -> SplitFractions:
        """Parses ``"0.8,0.1,0.1"`` (train, validation, test)."""
        parts = [p.strip() for p in text.split(",")]
        if len(parts) != 3:
            raise ValueError(
                f"--split_fractions takes three comma-separated numbers "
                f"(train,validation,test), got {text!r}."
            )
        try:
            train, validation, test = (float(p) for p in parts)
        except ValueError:
            raise ValueError(f"--split_fractions has a non-number in {text!r}.") from None
        return cls(train, validation, test)

    def as_dict(self) -> dict[str, float]:
        return {contract.TRAIN: self.train, contract.VALIDATION: self.validation,
                contract.TEST: self.test}


def canonical_split(name: str) -> str:
    """Canonical split for an explicit split value (``"val"`` → ``"validation"``).

    Raises:
        ValueError: if ``name`` names no split.
    """
    try:
        return SPLIT_ALIASES[name.strip().lower()]
    except KeyError:
        raise ValueError(
            f"Unknown split {name!r}; use one of {sorted(SPLIT_ALIASES)}."
        ) from None


def assign_split(key: str, fractions: SplitFractions) -> str:
    """Split for ``key``: a stable hash of the key placed on the cumulative fractions."""
    u = hashing.unit_interval(key, hashing.SPLIT_SALT)
    if u < fractions.train:
        return contract.TRAIN
    if u < fractions.train + fractions.validation:
        return contract.VALIDATION
    return contract.TEST
