"""Column flags: their comma-separated lists, and the hint an input lacking a column gets
(the flag and the closest column)."""

from __future__ import annotations

import pytest

from etl.core.column_hints import column_names, pass_flags_hint


@pytest.mark.parametrize(("flag_value", "names"), [
    ("a,", ("a",)), (" a , b ", ("a", "b")), ("", ()), (None, ()), (" , ,", ())])
def test_column_names_strips_spaces_and_drops_empty_entries(flag_value, names):
    assert column_names(flag_value) == names


def test_pass_flags_hint_names_the_flag_with_the_closest_unused_column():
    assert pass_flags_hint({"--label_column": ["label"]}, ["path", "class"],
                           reserved=["path"]) == (
        ": pass --label_column=class (the closest column no other flag names)")


def test_pass_flags_hint_is_empty_when_nothing_is_missing():
    assert pass_flags_hint({"--label_column": ["label"]}, ["path", "label"]) == ""


def test_pass_flags_hint_gives_each_missing_column_its_own_candidate():
    named = {"--series_id_column": ["series_id"], "--timestamp_column": ["timestamp"],
             "--value_columns": ["value"]}
    assert pass_flags_hint(named, ["series", "date", "value"]) == (
        ": pass --series_id_column=series --timestamp_column=date (the closest columns "
        "no other flag names)")


def test_pass_flags_hint_keeps_a_list_flags_other_columns():
    named = {"--value_columns": ["sales", "prices"], "--known_columns": ["promo"]}
    assert pass_flags_hint(named, ["sales", "price", "promo", "store"]) == (
        ": pass --value_columns=sales,price (the closest column no other flag names)")


def test_pass_flags_hint_never_suggests_a_reserved_or_named_column():
    named = {"--label_column": ["label"], "--carry_columns": ["caption"]}
    assert pass_flags_hint(named, ["path", "split", "caption"], reserved=["path", "split"]
                           ) == (": pass --label_column=<column> (the closest column no "
                                 "other flag names)")

