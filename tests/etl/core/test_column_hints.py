"""An input lacking a column a flag names: the hint names the flag and the closest column."""

from __future__ import annotations

from etl.core.column_hints import pass_flags_hint


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

