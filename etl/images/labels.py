"""A manifest row's columns besides the image: class labels, numeric targets, carried text.

What an image is labelled with is the user's choice of columns (docs/LABELS.md):

* one class name (``--label_column``, default ``label``; a folder's class folder);
* a set of class names (``--multi_label``): a JSON array in JSONL, a string split on
  ``--label_separator`` in CSV; duplicates collapse, the empty set is allowed unless
  ``--require_label``;
* no class at all (``--label_column=none``), with numeric targets instead;
* numeric targets (``--target_columns``): JSON numbers or CSV text that parses as a
  finite float32;
* carried columns (``--carry_columns``): text copied into each example unchanged.

A value that cannot be used raises :class:`RowError` with the dead-letter reason the
job files it under; nothing is dropped silently.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from etl.core import column_hints, dead_letters
from reader.format import contract

# --label_column's value for "no class label".
NO_LABEL = "none"
DEFAULT_LABEL_COLUMN = "label"
DEFAULT_SEPARATOR = "|"
# Feature names the stored examples already use: a carried column may not take one.
RESERVED_FEATURES = frozenset({
    contract.IMAGE_KEY, contract.HEIGHT_KEY, contract.WIDTH_KEY, contract.CHANNELS_KEY,
    contract.LABEL_KEY, contract.LABEL_NAME_KEY, contract.SOURCE_KEY, contract.TARGET_KEY})

# A record's label: one class name, a sorted set of names, or None (no class label).
Label = str | tuple[str, ...] | None


class RowError(ValueError):
    """A row value the job cannot use: ``reason`` is its dead-letter reason code."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


@dataclasses.dataclass(frozen=True)
class LabelColumns:
    """Which columns of a manifest row hold what (all recorded in the manifest)."""

    label_column: str | None = DEFAULT_LABEL_COLUMN  # None: no class label.
    multi_label: bool = False
    label_separator: str = DEFAULT_SEPARATOR
    require_label: bool = False  # multi-label: an empty set is a dead letter.
    target_columns: tuple[str, ...] = ()
    normalize_targets: bool = True  # z-score by the train split's mean and std.
    carry_columns: tuple[str, ...] = ()
    # How class ids are numbered (contract.CLASS_ORDERS; etl/core/transform/class_vocabulary.py).
    class_order: str = contract.CLASS_ORDER_NAME

    def __post_init__(self) -> None:
        if self.label_column is None and not self.target_columns:
            raise ValueError("--label_column=none needs --target_columns: an example must "
                             "have a class label or a numeric target to learn.")
        if self.label_column is None and self.multi_label:
            raise ValueError("--multi_label needs a label column; got --label_column=none.")
        if self.require_label and not self.multi_label:
            raise ValueError("--require_label applies to --multi_label (a single class "
                             "label is always required).")
        if self.class_order not in contract.CLASS_ORDERS:
            raise ValueError(f"--class_order must be one of {', '.join(contract.CLASS_ORDERS)}"
                             f", got {self.class_order!r}.")
        if not self.label_separator or self.label_separator.strip() != self.label_separator:
            raise ValueError(f"--label_separator must be a non-blank string without "
                             f"surrounding spaces, got {self.label_separator!r}.")
        self._check_names()

    def _check_names(self) -> None:
        named = [("path", "path"), ("split", "split")]
        if self.label_column is not None:
            named.append(("--label_column", self.label_column))
        named += [("--target_columns", c) for c in self.target_columns]
        named += [("--carry_columns", c) for c in self.carry_columns]
        seen: dict[str, str] = {}
        for flag, column in named:
            if not column.strip():
                raise ValueError(f"{flag} names an empty column.")
            if column in seen:
                raise ValueError(f"Column {column!r} is named twice ({seen[column]} and "
                                 f"{flag}); each column has one role.")
            seen[column] = flag
        clashes = sorted(set(self.carry_columns) & RESERVED_FEATURES)
        if clashes:
            raise ValueError(f"--carry_columns {clashes} would overwrite stored features of "
                             f"the same name {sorted(RESERVED_FEATURES)}; rename the "
                             f"column(s) in the manifest.")

    @property
    def task(self) -> str:
        """The manifest's ``task``: what the label is."""
        if self.label_column is None:
            return contract.REGRESSION
        return contract.MULTI_LABEL if self.multi_label else contract.CLASSIFICATION

    @property
    def is_default(self) -> bool:
        """One class per image from ``label``, nothing else: what a folder gives (in
        either class order)."""
        return dataclasses.replace(self, class_order=ONE_CLASS.class_order) == ONE_CLASS

    def required_columns(self) -> tuple[str, ...]:
        """Columns a CSV header must have (besides ``path``)."""
        label = () if self.label_column is None else (self.label_column,)
        return label + self.target_columns + self.carry_columns

    def named_columns(self) -> dict[str, tuple[str, ...]]:
        """The flag that names each required column → its columns (for errors)."""
        label = () if self.label_column is None else (self.label_column,)
        return {"--label_column": label, "--target_columns": self.target_columns,
                "--carry_columns": self.carry_columns}

    def describe(self) -> dict[str, Any]:
        """The manifest's ``preprocessing.labels`` entry."""
        return {
            "label_column": self.label_column,
            "multi_label": self.multi_label,
            "class_order": None if self.label_column is None else self.class_order,
            "label_separator": self.label_separator if self.multi_label else None,
            "require_label": self.require_label,
            "target_columns": list(self.target_columns),
            "normalize_targets": None if not self.target_columns else (
                "zscore: (x - train mean) / train std (population; std 0 -> 1), exact "
                "train statistics" if self.normalize_targets else "none: stored as given"),
            "carry_columns": list(self.carry_columns),
        }

    def parse(self, row: Mapping[str, Any], from_csv: bool
              ) -> tuple[Label, tuple[float, ...], tuple[str, ...]]:
        """A row's ``(label, targets, carried values)``.

        Raises:
            RowError: for the first unusable value, with its reason code.
        """
        label: Label = None
        if self.label_column is not None:
            if not from_csv and self.label_column not in row:  # A JSONL row's keys.
                hint = column_hints.pass_flags_hint(self.named_columns(), list(row),
                                                    reserved=("path", "split"))
                raise RowError(dead_letters.MISSING_LABEL,
                               f"Row has no {self.label_column!r} field; its fields are "
                               f"{list(row)}{hint}.")
            value = row.get(self.label_column)
            label = (parse_label_set(value, from_csv, self.label_separator,
                                     self.require_label) if self.multi_label
                     else parse_label(value))
        targets = tuple(parse_target(name, row.get(name), from_csv)
                        for name in self.target_columns)
        carried = tuple(parse_carried(name, row.get(name)) for name in self.carry_columns)
        return label, targets, carried


# One class per image from the ``label`` column: what a folder input gives.
ONE_CLASS = LabelColumns()


def label_names(label: Label) -> tuple[str, ...]:
    """The class names of a record's label (none, one, or a set)."""
    if label is None:
        return ()
    return (label,) if isinstance(label, str) else label


def names_not_in(label: Label, vocabulary: frozenset[str]) -> list[str]:
    """The class names of ``label`` that ``vocabulary`` lacks, sorted."""
    return sorted(set(label_names(label)) - vocabulary)


def vocabulary_problem(name: str) -> str | None:
    """Why the class name ``name`` cannot be a label vocabulary entry, or None.

    tf.Transform writes the vocabulary as a text file, one name a line, and leaves out
    a name holding a line feed or carriage return (``tft.vocabulary``), which would
    then map to -1; and a name must be UTF-8 text (a JSON ``"\\udce9"`` escape is
    not).
    """
    if "\n" in name or "\r" in name:
        return ("contains a line break: tf.Transform's label vocabulary is a text file "
                "of one name a line, which cannot hold it")
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return "is not UTF-8 text (it holds a lone surrogate code point)"
    return None


def _check_name(name: Any, what: str) -> str:
    if not isinstance(name, str):
        raise RowError(dead_letters.INVALID_LABEL,
                       f"{what} {name!r} is not a string.")
    problem = vocabulary_problem(name)
    if problem is not None:
        # At most 200 characters: a CSV quote left open runs a label on for many lines.
        shown = repr(name) if len(name) <= 200 else f"{name[:200]!r}..."
        raise RowError(dead_letters.INVALID_LABEL, f"{what} {shown} {problem}.")
    if not name.strip():
        raise RowError(dead_letters.INVALID_LABEL, f"{what} {name!r} is blank.")
    return name.strip()


def parse_label(value: Any) -> str:
    """One class name (stripped).

    Raises:
        RowError: ``missing_label`` (absent or empty), ``invalid_label`` (not a string,
            or not a vocabulary entry: :func:`vocabulary_problem`).
    """
    if value is None or (isinstance(value, str) and not value.strip()):
        raise RowError(dead_letters.MISSING_LABEL, f"Label {value!r} is empty or missing.")
    if isinstance(value, list):
        raise RowError(dead_letters.INVALID_LABEL,
                       f"Label {value!r} is a list; pass --multi_label for several "
                       f"classes per image.")
    return _check_name(value, "Label")


def parse_label_set(value: Any, from_csv: bool, separator: str, require: bool
                    ) -> tuple[str, ...]:
    """A set of class names, sorted, duplicates collapsed.

    CSV: the field split on ``separator`` (empty pieces, as in ``a||b`` or an empty
    field, are no names). JSONL: an array of strings; ``[]`` is the empty set.

    Raises:
        RowError: ``missing_label`` (JSONL field absent or null; an empty set when
            ``require``), ``invalid_label`` (not an array, a non-string or blank item,
            a line break).
    """
    if from_csv:
        names = [piece for piece in str(value or "").split(separator) if piece.strip()]
    elif value is None:
        raise RowError(dead_letters.MISSING_LABEL, "Label set is missing (null or absent); "
                                                   "write [] for an image with no class.")
    elif not isinstance(value, list):
        raise RowError(dead_letters.INVALID_LABEL,
                       f"Label {value!r} is not a JSON array; with --multi_label a JSONL "
                       f"label is a list of class names, e.g. [\"cat\", \"outdoor\"].")
    else:
        names = value
    result = tuple(sorted({_check_name(name, "Class name") for name in names}))
    if require and not result:
        raise RowError(dead_letters.MISSING_LABEL,
                       "Label set is empty and --require_label is set.")
    return result


def parse_target(name: str, value: Any, from_csv: bool) -> float:
    """A numeric target as the float32 value it is stored as (a Python float).

    Raises:
        RowError: ``missing_target`` (absent, null or empty), ``invalid_target`` (not
            a number: CSV text float() refuses, a JSON string or boolean),
            ``non_finite_target`` (NaN, infinity, or beyond float32's range).
    """
    if value is None or (isinstance(value, str) and not value.strip()):
        raise RowError(dead_letters.MISSING_TARGET,
                       f"Target column {name!r} is empty or missing.")
    if from_csv:
        try:
            number = float(value)
        except ValueError:
            raise RowError(dead_letters.INVALID_TARGET,
                           f"Target column {name!r} holds {value!r}, not a number.") from None
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        number = float(value) if not isinstance(value, int) or abs(value) < 2**1024 else math.inf
    else:
        raise RowError(dead_letters.INVALID_TARGET,
                       f"Target column {name!r} holds {value!r}, not a JSON number.")
    with np.errstate(over="ignore"):
        stored = np.float32(number)
    if not np.isfinite(stored):
        raise RowError(dead_letters.NON_FINITE_TARGET,
                       f"Target column {name!r} holds {value!r}, which is not a finite "
                       f"float32 (NaN, infinite, or beyond +-3.4e38).")
    return float(stored)


def parse_carried(name: str, value: Any) -> str:
    """A carried column's text, unchanged.

    Raises:
        RowError: ``invalid_carried_value`` (absent, null, not a string in JSONL, or
            not UTF-8 text).
    """
    if not isinstance(value, str):
        what = "missing" if value is None else f"{value!r}, not a string"
        raise RowError(dead_letters.INVALID_CARRIED_VALUE,
                       f"Carried column {name!r} is {what}; carried columns hold text "
                       f"(write numbers as JSON strings).")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise RowError(dead_letters.INVALID_CARRIED_VALUE,
                       f"Carried column {name!r} holds {value!r}, which is not UTF-8 "
                       f"text (a lone surrogate code point).") from None
    return value
