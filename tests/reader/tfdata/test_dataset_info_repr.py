"""``print(reader.open_dataset(d))``: a short TFDS-style summary, not the manifest."""

from __future__ import annotations

import reader
from tests.reader.label_fixtures import IMAGE_SIZE, NUM_ROWS


def test_dataset_info_repr_summarises_the_dataset(class_targets_dataset):
    # label_fixtures: every 6th row (index % 6 == 4) in validation, == 5 in test.
    validation = test = NUM_ROWS // 6
    expected = f"""DatasetInfo(
    name='labels',
    kind='images',
    task='classification',
    num_classes=3,
    target_columns=['age'],
    features={{
        'image': string,  # raw, {IMAGE_SIZE}x{IMAGE_SIZE}
        'key': string,
        'label': int64,
        'label_name': string,
        'target': float32[1],
    }},
    splits={{
        'train': {NUM_ROWS - validation - test} records in 3 shards,
        'validation': {validation} records in 3 shards,
        'test': {test} records in 3 shards,
    }},
    data_dir={class_targets_dataset!r},
)"""
    info = reader.open_dataset(class_targets_dataset)
    assert repr(info) == str(info) == expected


def test_dataset_info_repr_shows_var_len_features_and_no_targets(multi_label_dataset):
    text = repr(reader.open_dataset(multi_label_dataset))
    assert "    task='multi_label',\n    num_classes=5,\n    features={" in text
    assert "        'label': int64[None],\n        'label_name': string[None],\n" in text
    assert "target" not in text
    assert len(text) < 1000
