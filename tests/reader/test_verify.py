"""python -m reader.verify: each damaged shard named, its problem stated in words."""

from __future__ import annotations

import gzip
import os
import struct
import subprocess
import sys

import pytest

import reader
from reader import verify


def record_offsets(stream: bytes) -> list[int]:
    """Start of each TFRecord: 8-byte length, 4-byte length CRC, data, 4-byte data CRC."""
    offsets, position = [], 0
    while position < len(stream):
        (length,) = struct.unpack("<Q", stream[position:position + 8])
        offsets.append(position)
        position += 8 + 4 + length + 4
    return offsets


def corrupt_record_data(shard: str, index: int) -> int:
    """Flips a byte inside record ``index``'s data; returns where its data starts."""
    with open(shard, "rb") as f:
        stream = bytearray(gzip.decompress(f.read()))
    data_start = record_offsets(bytes(stream))[index] + 12
    stream[data_start + 3] ^= 0xFF
    with open(shard, "wb") as f:
        f.write(gzip.compress(bytes(stream)))
    return data_start


def test_verify_main_states_the_damage_in_words(dataset_copy, capsys):
    info = reader.open_dataset(dataset_copy)
    shard = info.shard_paths("train")[1]
    entry = info.manifest["splits"]["train"]["shards"][1]
    records = entry["num_records"]
    data_start = corrupt_record_data(shard, 2)
    assert verify.main([dataset_copy]) == 1
    # tf.data stops reading a shard at its first bad record: the two before it remain.
    assert capsys.readouterr().out.splitlines() == [(
        f"DAMAGED {shard}: {os.path.getsize(shard):,} bytes, the manifest records "
        f"{entry['num_bytes']:,} (truncated or replaced); record 3 of {records} fails "
        f"its CRC check (at byte {data_start:,} of the decompressed stream); 2 of "
        f"{records} records readable")]


def test_verify_cli_prints_no_tensorflow_internals(dataset_copy):
    corrupt_record_data(reader.open_dataset(dataset_copy).shard_paths("train")[0], 0)
    result = subprocess.run([sys.executable, "-m", "reader.verify", dataset_copy],
                            capture_output=True, text=True)
    assert result.returncode == 1
    output = result.stdout + result.stderr
    assert "function_node" not in output and "[Op:" not in output
    assert "deprecated" not in output


def test_verify_describes_a_damaged_gzip_trailer(dataset_copy):
    info = reader.open_dataset(dataset_copy)
    shard = info.shard_paths("train")[0]
    entry = info.manifest["splits"]["train"]["shards"][0]
    with open(shard, "rb") as f:
        data = bytearray(f.read())
    data[-8] ^= 0xFF  # The trailer's CRC-32 of the decompressed stream.
    with open(shard, "wb") as f:
        f.write(bytes(data))
    # tf.data inflates 256 KiB of a GZIP file at a time: zlib checks the trailer of a
    # smaller shard before the first record comes out, so none is readable.
    assert len(data) < 256 * 1024
    assert verify.shard_problems(shard, entry) == [
        "its sha256 differs from the manifest's (bytes changed after the job wrote it)",
        (f"the GZIP data cannot be decompressed after 0 records (incorrect data check); "
         f"0 of {entry['num_records']} records readable")]


def test_verify_names_a_missing_shard(dataset_copy):
    shard = reader.open_dataset(dataset_copy).shard_paths("validation")[0]
    os.remove(shard)
    assert verify.find_damaged_shards(dataset_copy) == [(shard, "missing")]


def test_verify_without_a_dataset_says_so_in_one_line(tmp_path, capsys):
    assert verify.main([str(tmp_path / "missing")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: No manifest.json under ") and err.count("\n") == 1


def test_verify_help_prints_usage_and_exits_zero(capsys):
    with pytest.raises(SystemExit) as exit_info:
        verify.main(["--help"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out.startswith("usage: python -m reader.verify")
