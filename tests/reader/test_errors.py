"""The reader refuses unfinished or damaged directories, naming the file at fault."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import tensorflow as tf

import reader
from reader import verify
from reader.format import contract
from tests.reader.helpers import first_train_shard, flip_byte_in_middle


def test_make_dataset_refuses_directory_without_manifest(dataset_copy):
    os.remove(os.path.join(dataset_copy, contract.MANIFEST_FILENAME))
    with pytest.raises(FileNotFoundError, match="did the ETL job finish"):
        reader.make_dataset(dataset_copy)


def test_make_dataset_names_missing_shard(dataset_copy):
    shard = first_train_shard(dataset_copy)
    os.remove(shard)
    with pytest.raises(reader.DatasetError, match="missing") as info:
        reader.make_dataset(dataset_copy)
    assert shard in str(info.value)


def test_make_dataset_names_truncated_shard(dataset_copy):
    shard = first_train_shard(dataset_copy)
    data = open(shard, "rb").read()
    with open(shard, "wb") as f:
        f.write(data[:-10])
    with pytest.raises(reader.DatasetError, match="truncated") as info:
        reader.make_dataset(dataset_copy)
    assert shard in str(info.value)


def test_make_dataset_verify_detects_altered_bytes(dataset_copy):
    shard = first_train_shard(dataset_copy)
    flip_byte_in_middle(shard)  # Same size: only the sha256 check can tell.
    reader.make_dataset(dataset_copy)  # Size check passes without verify.
    with pytest.raises(reader.DatasetError, match="sha256") as info:
        reader.make_dataset(dataset_copy, read_config=reader.ReadConfig(verify=True))
    assert shard in str(info.value)


def test_corrupt_record_raises_data_loss_and_verify_names_the_shard(dataset_copy):
    shard = first_train_shard(dataset_copy)
    flip_byte_in_middle(shard)
    with pytest.raises((tf.errors.DataLossError, tf.errors.InvalidArgumentError)):
        for _ in reader.make_dataset(dataset_copy, shuffle=False):
            pass
    damaged = verify.find_damaged_shards(dataset_copy)
    assert [path for path, _ in damaged] == [shard]


def test_verify_main_says_ok_and_returns_zero_for_an_intact_dataset(image_dataset, capsys):
    assert verify.main([image_dataset]) == 0
    assert capsys.readouterr().out.startswith(f"OK: every shard of {image_dataset} ")


def test_verify_main_names_the_damaged_shard_and_returns_one(dataset_copy, capsys):
    shard = first_train_shard(dataset_copy)
    flip_byte_in_middle(shard)
    assert verify.main([dataset_copy]) == 1
    assert capsys.readouterr().out.startswith(f"DAMAGED {shard}: ")


def test_import_reader_does_not_import_apache_beam():
    code = ("import sys, reader; "
            "bad = [m for m in sys.modules if m.split('.')[0] in "
            "('apache_beam', 'tensorflow_transform')]; "
            "assert not bad, bad")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-2000:]


def test_skip_corrupt_reads_around_damage_and_verify_counts_the_loss(dataset_copy):
    shard = first_train_shard(dataset_copy)
    flip_byte_in_middle(shard)
    info = reader.open_dataset(dataset_copy)
    dataset = reader.make_dataset(dataset_copy, shuffle=False, features=["key"],
                                  read_config=reader.ReadConfig(skip_corrupt=True))
    keys = [k for features, _ in dataset.as_numpy_iterator() for k in features["key"]]
    # Every other shard is read in full; the damaged one loses at least one record.
    assert len(set(keys)) == len(keys) < info.num_records("train")
    [(path, problem)] = verify.find_damaged_shards(dataset_copy)
    assert path == shard
    assert "records readable" in problem and "sha256" in problem


def test_transform_output_without_tensorflow_transform_says_what_to_install(
        image_dataset, monkeypatch):
    # A None entry in sys.modules makes ``import tensorflow_transform`` fail as if absent.
    monkeypatch.setitem(sys.modules, "tensorflow_transform", None)
    with pytest.raises(ImportError, match="pip install 'tensorflow-transform"):
        reader.transform_output(image_dataset)
