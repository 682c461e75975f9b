"""Asking for a split the dataset does not have names the splits it has."""

from __future__ import annotations

import pytest

import reader

# The image dataset's manifest lists its splits by name, sorted (manifest.json is
# written with sorted keys).
SPLITS_TEXT = "'test', 'train', 'validation'"


@pytest.mark.parametrize(("split", "hint"), [
    ("valid", " Did you mean 'validation'?"),  # The job's split folder aliases.
    ("val", " Did you mean 'validation'?"),
    ("training", " Did you mean 'train'?"),
    ("tset", " Did you mean 'test'?"),  # A misspelling, by difflib.
    ("holdout", ""),
])
def test_make_dataset_unknown_split_names_splits_and_closest(image_dataset, split, hint):
    with pytest.raises(ValueError) as info:
        reader.make_dataset(image_dataset, split)
    assert str(info.value) == (f"Unknown split {split!r}: {image_dataset!r} has splits "
                               f"{SPLITS_TEXT}.{hint}")


def test_open_dataset_unknown_split_is_not_a_dataset_error(image_dataset):
    # The directory is intact; only the argument is wrong.
    with pytest.raises(ValueError) as info:
        reader.open_dataset(image_dataset, splits=["valid"])
    assert not isinstance(info.value, reader.DatasetError)


def test_dataset_info_num_records_unknown_split_names_splits(image_dataset):
    info = reader.open_dataset(image_dataset)
    with pytest.raises(ValueError) as error:
        info.num_records("dev")
    assert str(error.value) == (f"Unknown split 'dev': {image_dataset!r} has splits "
                                f"{SPLITS_TEXT}.")
