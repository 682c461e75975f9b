"""The reader refuses unfinished or damaged directories, naming the file at fault."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest
import tensorflow as tf

import reader
from reader import contract, verify


@pytest.fixture()
def dataset_copy(image_dataset, tmp_path) -> str:
    copy = str(tmp_path / "copy")
    shutil.copytree(image_dataset, copy)
    return copy


def first_train_shard(data_dir: str) -> str:
    return reader.open_dataset(data_dir).shard_paths("train")[0]


def flip_byte_in_middle(path: str) -> None:
    data = bytearray(open(path, "rb").read())
    data[len(data) // 2] ^= 0xFF
    with open(path, "wb") as f:
        f.write(bytes(data))


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


def test_verify_cli_exit_codes(image_dataset, dataset_copy):
    ok = subprocess.run([sys.executable, "-m", "reader.verify", image_dataset],
                        capture_output=True, text=True)
    assert ok.returncode == 0 and "OK" in ok.stdout
    shard = first_train_shard(dataset_copy)
    flip_byte_in_middle(shard)
    bad = subprocess.run([sys.executable, "-m", "reader.verify", dataset_copy],
                         capture_output=True, text=True)
    assert bad.returncode == 1
    assert f"DAMAGED {shard}" in bad.stdout


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


BLOCK_TFT = """
import sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "tensorflow_transform":
            raise ImportError(f"No module named {name!r} (blocked by the test)")
sys.meta_path.insert(0, Block())
import reader
try:
    reader.transform_output(sys.argv[1])
except ImportError as error:
    print(error)
"""


def test_transform_output_without_tensorflow_transform_says_what_to_install(image_dataset):
    result = subprocess.run([sys.executable, "-c", BLOCK_TFT, image_dataset],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "pip install 'tensorflow-transform" in result.stdout
