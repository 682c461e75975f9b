"""etl/core/shards/splits.py: split fractions, split names and hash-based assignment."""

from __future__ import annotations

import collections

import pytest

from etl.core import hashing
from etl.core.shards import splits
from reader.format import contract


def test_split_fractions_default_is_80_10_10():
    assert splits.SplitFractions().as_dict() == {"train": 0.8, "validation": 0.1, "test": 0.1}


def test_split_fractions_parse_reads_train_validation_test_in_order():
    assert splits.SplitFractions.parse("0.7,0.2,0.1") == splits.SplitFractions(0.7, 0.2, 0.1)


def test_split_fractions_parse_ignores_spaces_and_accepts_integers():
    assert splits.SplitFractions.parse(" 1 , 0 ,0 ") == splits.SplitFractions(1.0, 0.0, 0.0)


@pytest.mark.parametrize("text", ["0.8,0.2", "0.5,0.2,0.2,0.1", "1", ""])
def test_split_fractions_parse_rejects_wrong_count(text):
    with pytest.raises(ValueError, match="three comma-separated numbers") as info:
        splits.SplitFractions.parse(text)
    assert repr(text) in str(info.value)


@pytest.mark.parametrize("text", ["0.8,abc,0.1", "0.8,,0.2", "80%,10%,10%"])
def test_split_fractions_parse_rejects_non_number(text):
    with pytest.raises(ValueError, match="non-number") as info:
        splits.SplitFractions.parse(text)
    assert repr(text) in str(info.value)


def test_split_fractions_parse_rejects_negative():
    with pytest.raises(ValueError, match=r">= 0 and sum to 1.*validation=-0\.1"):
        splits.SplitFractions.parse("1.1,-0.1,0")


@pytest.mark.parametrize("text", ["0.8,0.1,0.2", "0.5,0.1,0.1", "0,0,0"])
def test_split_fractions_parse_rejects_sum_other_than_one(text):
    with pytest.raises(ValueError, match="sum to 1"):
        splits.SplitFractions.parse(text)


@pytest.mark.parametrize("text", ["nan,0.5,0.5", "0.5,nan,0.5", "inf,0,0"])
def test_split_fractions_parse_rejects_non_finite(text):
    # NaN fails every comparison, so "v < 0" and "|sum - 1| > eps" are both False for it.
    with pytest.raises(ValueError, match="sum to 1"):
        splits.SplitFractions.parse(text)


def test_split_fractions_constructor_validates_too():
    with pytest.raises(ValueError, match="sum to 1"):
        splits.SplitFractions(0.9, 0.1, 0.1)


@pytest.mark.parametrize(("name", "expected"), [
    ("train", "train"), ("training", "train"),
    ("validation", "validation"), ("valid", "validation"), ("val", "validation"),
    ("test", "test"), ("testing", "test"),
    ("VAL", "validation"), (" Train ", "train"),
])
def test_canonical_split_maps_aliases(name, expected):
    assert splits.canonical_split(name) == expected


@pytest.mark.parametrize("name", ["dev", "", "trainn", "holdout"])
def test_canonical_split_rejects_unknown_name(name):
    with pytest.raises(ValueError, match=f"Unknown split {name!r}; use one of .*'val'"):
        splits.canonical_split(name)


def test_assign_split_proportions_over_20k_keys():
    fractions = splits.SplitFractions()
    counts = collections.Counter(
        splits.assign_split(f"class{i % 7}/img_{i}.jpg", fractions) for i in range(20_000))
    assert set(counts) == set(contract.SPLITS)
    for split, expected in fractions.as_dict().items():
        assert abs(counts[split] / 20_000 - expected) <= 0.02, (split, counts)


def test_assign_split_is_a_threshold_on_the_split_hash():
    fractions = splits.SplitFractions(0.5, 0.25, 0.25)
    for i in range(500):
        key = f"k{i}"
        u = hashing.unit_interval(key, hashing.SPLIT_SALT)
        expected = "train" if u < 0.5 else "validation" if u < 0.75 else "test"
        assert splits.assign_split(key, fractions) == expected, key


@pytest.mark.parametrize(("fractions", "only"), [
    ((1.0, 0.0, 0.0), "train"),
    ((0.0, 1.0, 0.0), "validation"),
    ((0.0, 0.0, 1.0), "test"),
])
def test_assign_split_degenerate_fractions_use_one_split(fractions, only):
    assigned = {splits.assign_split(f"img/{i}.png", splits.SplitFractions(*fractions))
                for i in range(2000)}
    assert assigned == {only}


def test_assign_split_frozen_examples():
    # Frozen: a change here silently moves examples between splits across versions.
    fractions = splits.SplitFractions()
    assigned = {k: splits.assign_split(k, fractions)
                for k in ("cat/0.png", "cat/1.png", "cat/6.png", "cat/8.png")}
    assert assigned == {"cat/0.png": "validation", "cat/1.png": "train",
                        "cat/6.png": "test", "cat/8.png": "train"}
