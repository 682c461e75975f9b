"""etl/images/labels.py: what a manifest row's label, target and carried columns become."""

from __future__ import annotations

import math

import numpy as np
import pytest

from etl.images import labels
from etl.images.labels import LabelColumns, RowError

MULTI = LabelColumns(label_column="tags", multi_label=True)


def _reason(call) -> str:
    with pytest.raises(RowError) as error:
        call()
    return error.value.reason


# --- Multi-label sets ----------------------------------------------------------------

def test_csv_label_set_is_split_on_the_separator_sorted_and_deduplicated():
    assert MULTI.parse({"tags": "outdoor|cat| cat |dog"}, from_csv=True)[0] == (
        "cat", "dog", "outdoor")


def test_csv_label_set_ignores_empty_pieces_and_may_be_empty():
    assert MULTI.parse({"tags": "|cat||"}, from_csv=True)[0] == ("cat",)
    assert MULTI.parse({"tags": ""}, from_csv=True)[0] == ()


def test_csv_label_set_uses_the_given_separator():
    columns = LabelColumns(label_column="tags", multi_label=True, label_separator=";")
    assert columns.parse({"tags": "a|b;c"}, from_csv=True)[0] == ("a|b", "c")


def test_jsonl_label_set_is_an_array_of_names():
    assert MULTI.parse({"tags": ["b", "a", "b"]}, from_csv=False)[0] == ("a", "b")
    assert MULTI.parse({"tags": []}, from_csv=False)[0] == ()


@pytest.mark.parametrize("value, reason", [
    (["cat", 3], "invalid_label"),
    (["cat", ""], "invalid_label"),
    (["cat", "  "], "invalid_label"),
    (["ca\nt"], "invalid_label"),
    ("cat", "invalid_label"),
    (None, "missing_label"),
])
def test_jsonl_label_set_rejects_what_is_not_an_array_of_names(value, reason):
    assert _reason(lambda: MULTI.parse({"tags": value}, from_csv=False)) == reason


def test_require_label_rejects_an_empty_set():
    columns = LabelColumns(label_column="tags", multi_label=True, require_label=True)
    assert _reason(lambda: columns.parse({"tags": ""}, from_csv=True)) == "missing_label"


def test_a_list_as_single_label_names_the_multi_label_flag():
    with pytest.raises(RowError, match="--multi_label"):
        labels.ONE_CLASS.parse({"label": ["a", "b"]}, from_csv=False)


@pytest.mark.parametrize("name", ["big\ncat", "cat\r", "\ud800", "caf\udce9"])
def test_a_label_the_vocabulary_cannot_hold_is_invalid_and_says_why(name):
    # tf.Transform's vocabulary file holds one name a line and drops names with line
    # breaks; a lone surrogate (a JSON "\\ud800" escape) is no UTF-8 text.
    why = ("contains a line break: tf.Transform's label vocabulary is a text file of one "
           "name a line, which cannot hold it" if "\n" in name or "\r" in name else
           "is not UTF-8 text (it holds a lone surrogate code point)")
    assert labels.vocabulary_problem(name) == why
    with pytest.raises(RowError) as error:
        labels.ONE_CLASS.parse({"label": name}, from_csv=False)
    assert (error.value.reason, str(error.value)) == ("invalid_label", f"Label {name!r} {why}.")
    assert _reason(lambda: MULTI.parse({"tags": ["a", name]}, from_csv=False)) == \
        "invalid_label"


@pytest.mark.parametrize("name", ["v\x0bt", "nel\x85", "ls\u2028", "\t tab ", "%E9", "é"])
def test_other_control_and_separator_characters_are_vocabulary_entries(name):
    # Each round-trips through tft.vocabulary's file and its lookup: lines end at "\n".
    assert labels.vocabulary_problem(name) is None


# --- Numeric targets -----------------------------------------------------------------

TARGETS = LabelColumns(label_column=None, target_columns=("age", "score"))


def test_targets_are_read_in_flag_order_as_float32_values():
    _, targets, _ = TARGETS.parse({"score": "0.1", "age": " 42 "}, from_csv=True)
    assert targets == (42.0, float(np.float32(0.1)))
    assert TARGETS.parse({"score": 0.1, "age": 42}, from_csv=False)[1] == targets


@pytest.mark.parametrize("value, from_csv, reason", [
    ("", True, "missing_target"),
    (None, False, "missing_target"),
    ("abc", True, "invalid_target"),
    ("abc", False, "invalid_target"),
    ("3.5", False, "invalid_target"),
    (True, False, "invalid_target"),
    ("nan", True, "non_finite_target"),
    ("inf", True, "non_finite_target"),
    ("1e39", True, "non_finite_target"),
    (math.nan, False, "non_finite_target"),
    (1e39, False, "non_finite_target"),
    (10**400, False, "non_finite_target"),
])
def test_unusable_targets_get_their_reason(value, from_csv, reason):
    row = {"age": value, "score": "1" if from_csv else 1}
    assert _reason(lambda: TARGETS.parse(row, from_csv)) == reason


def test_an_absent_target_field_is_missing():
    assert _reason(lambda: TARGETS.parse({"score": 1}, False)) == "missing_target"


def test_largest_float32_is_a_finite_target():
    largest = float(np.finfo(np.float32).max)
    assert TARGETS.parse({"age": largest, "score": -largest}, False)[1] == (
        largest, -largest)


# --- Carried columns -----------------------------------------------------------------

CARRY = LabelColumns(carry_columns=("id", "caption"))


def test_carried_text_is_kept_unchanged():
    row = {"label": "a", "id": " 007 ", "caption": "a, \"b\"\nc"}
    assert CARRY.parse(row, from_csv=False)[2] == (" 007 ", "a, \"b\"\nc")


@pytest.mark.parametrize("value", [None, 7, ["a"], "x\ud800"])
def test_carried_value_that_is_not_text_is_rejected(value):
    row = {"label": "a", "id": value, "caption": ""}
    assert _reason(lambda: CARRY.parse(row, from_csv=False)) == "invalid_carried_value"


# --- The columns' own rules ----------------------------------------------------------

def test_tasks_follow_the_columns():
    assert labels.ONE_CLASS.task == "classification"
    assert MULTI.task == "multi_label"
    assert TARGETS.task == "regression"


@pytest.mark.parametrize("kwargs, message", [
    ({"label_column": None}, "--target_columns"),
    ({"label_column": None, "multi_label": True, "target_columns": ("a",)}, "--multi_label"),
    ({"require_label": True}, "--multi_label"),
    ({"label_separator": ""}, "--label_separator"),
    ({"target_columns": ("a", "a")}, "named twice"),
    ({"target_columns": ("label",)}, "named twice"),
    ({"carry_columns": ("path",)}, "named twice"),
    ({"carry_columns": ("image",)}, "overwrite stored features"),
    ({"carry_columns": ("target",)}, "overwrite stored features"),
])
def test_unusable_column_choices_are_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        LabelColumns(**kwargs)


def test_csv_header_must_hold_every_named_column(tmp_path):
    from etl.images.sources import read_csv_header

    path = tmp_path / "m.csv"
    path.write_text("path,tags,age\n")
    columns = LabelColumns(label_column="tags", multi_label=True,
                           target_columns=("age", "score"))
    with pytest.raises(ValueError, match=r"lacks column\(s\) \['score'\]"):
        read_csv_header(str(path), columns)


def test_a_folder_input_refuses_label_columns(tmp_path):
    from etl.images.sources import check_input

    (tmp_path / "cat").mkdir()
    with pytest.raises(ValueError, match="is a folder"):
        check_input(str(tmp_path), MULTI)


def test_label_vocabulary_rejects_a_set_naming_an_unlisted_class():
    from etl.core.shards import splits
    from etl.images.sources import ImageRecord, assign_split

    fractions = splits.SplitFractions.parse("0.8,0.1,0.1")
    allowed = frozenset({"cat", "dog"})
    kept = ImageRecord("a.jpg", "/a.jpg", ("cat", "dog"), split="train")
    assert assign_split(kept, fractions, allowed) == kept
    rejected = assign_split(ImageRecord("b.jpg", "/b.jpg", ("cat", "emu", "owl")),
                            fractions, allowed)
    assert (rejected.reason, rejected.message) == (
        "unknown_label", "Label 'emu', 'owl' is not in --label_vocabulary.")


def test_a_jsonl_row_without_the_label_field_says_which_flag_to_pass():
    with pytest.raises(RowError) as error:
        LabelColumns().parse({"path": "a.png", "class": "cat"}, from_csv=False)
    assert error.value.reason == "missing_label"
    assert str(error.value) == ("Row has no 'label' field; its fields are ['path', "
                                "'class']: pass --label_column=class (the closest column "
                                "no other flag names).")
