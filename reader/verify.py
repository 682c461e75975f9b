"""Full integrity check of a dataset: every shard's size, hash, record count and CRCs,
and each uncompressed shard's record index (its size, hash, and agreement with the
shard).

tf.data reports a corrupt record as ``DataLossError: corrupted record at <offset>``
without naming the file (interleave mixes shards). When training hits that error, run

    python -m reader.verify <data_dir>

which prints one ``DAMAGED <path>: <problem>`` line per bad shard, in words, and exits 1.
"""

from __future__ import annotations

import argparse
import re
import sys

import tensorflow as tf

from reader.format import contract, record_index
from reader.tfdata.dataset_info import open_dataset, sha256_of_file

# tf.data's messages for a damaged TFRecord stream (TensorFlow 2.21).
_CORRUPTED = re.compile(r"corrupted record at (\d+)")
_TRUNCATED = re.compile(r"truncated record at (\d+)")
_INFLATE = re.compile(r"inflate\(\) failed with error -?\d+: ([^\[]*)")
# Graph-node prefix and op suffix TensorFlow adds to an eager op's error message.
_NODE_PREFIX = re.compile(r"^\{\{function_node [^}]*\}\}\s*")
_OP_SUFFIX = re.compile(r"\s*\[Op:[^\]]*\].*$", re.DOTALL)


def _records(path: str, compression_type: str, skip_errors: bool = False
             ) -> tf.data.Dataset:
    dataset = tf.data.TFRecordDataset(path, compression_type=compression_type)
    return dataset.ignore_errors() if skip_errors else dataset


def read_until_error(path: str, compression_type: str = "GZIP"
                     ) -> tuple[int, tf.errors.OpError | None]:
    """(records read before the first error, that error or None) for one shard."""
    count = 0
    try:
        for _ in _records(path, compression_type):
            count += 1
    except (tf.errors.DataLossError, tf.errors.InvalidArgumentError) as error:
        return count, error
    return count, None


def describe_read_error(error: tf.errors.OpError, records_before: int, expected: int
                        ) -> str:
    """What a tf.data read error means, in words, with where it happened."""
    message = _OP_SUFFIX.sub("", _NODE_PREFIX.sub("", error.message)).strip()
    record = f"record {records_before + 1} of {expected}"
    if match := _CORRUPTED.search(message):
        return (f"{record} fails its CRC check (at byte {int(match.group(1)):,} of the "
                f"decompressed stream)")
    if match := _TRUNCATED.search(message):
        return (f"the stream ends inside {record} (at byte {int(match.group(1)):,} of "
                f"the decompressed stream)")
    if match := _INFLATE.search(message):
        return (f"the GZIP data cannot be decompressed after {records_before} records "
                f"({match.group(1).strip()})")
    return f"{record} cannot be read ({message})"


def _file_problems(path: str, entry: dict) -> list[str]:
    """What is wrong with the file at ``path`` against its manifest ``entry`` (size and
    sha256), in words; ["missing"] if there is none."""
    if not tf.io.gfile.exists(path):
        return ["missing"]
    size = tf.io.gfile.stat(path).length
    if size != entry["num_bytes"]:
        return [(f"{size:,} bytes, the manifest records {entry['num_bytes']:,} "
                f"(truncated or replaced)")]
    if sha256_of_file(path) != entry["sha256"]:
        return [("its sha256 differs from the manifest's (bytes changed after the job "
                "wrote it)")]
    return []


def index_problems(index_path: str, shard: dict) -> list[str]:
    """What is wrong with an uncompressed shard's record index, in words: its own
    size and sha256, then whether it lists the manifest's record count in frames
    that end where the shard does."""
    problems = _file_problems(index_path, shard["index"])
    if problems:
        return [f"its record index {index_path} is {', '.join(problems)}"]
    with tf.io.gfile.GFile(index_path, "r") as f:
        try:
            offsets, lengths = record_index.parse_index(f.read(), index_path)
        except contract.DatasetError as e:
            return [str(e)]
    if len(offsets) != shard["num_records"]:
        return [(f"its record index lists {len(offsets)} records, the manifest "
                f"{shard['num_records']}")]
    if int(lengths.sum()) != shard["num_bytes"]:
        return [(f"its record index's frames end at byte {int(lengths.sum()):,}, the "
                f"shard at {shard['num_bytes']:,}")]
    return []


def shard_problems(path: str, shard: dict, compression_type: str = "GZIP") -> list[str]:
    """Everything wrong with the shard at ``path`` (its manifest entry: ``shard``), in
    words; [] if it is intact."""
    problems = _file_problems(path, shard)
    if problems == ["missing"]:
        return problems
    if "index" in shard:
        problems += index_problems(contract.index_relpath(path), shard)
    expected = shard["num_records"]
    count, error = read_until_error(path, compression_type)
    if error is not None:
        readable = int(_records(path, compression_type, skip_errors=True).reduce(
            tf.constant(0, tf.int64), lambda n, _: n + 1))
        problems.append(f"{describe_read_error(error, count, expected)}; {readable} of "
                        f"{expected} records readable")
    elif count != expected:
        problems.append(f"holds {count} records, the manifest says {expected}")
    return problems


def find_damaged_shards(data_dir: str) -> list[tuple[str, str]]:
    """``(shard path, problems)`` for every shard that fails a check; [] if all pass.

    Checks existence, size and sha256 against the manifest, then reads every record
    (TFRecord CRCs and GZIP framing) and compares the record count.

    Raises:
        FileNotFoundError: no manifest (the job did not finish).
    """
    info = open_dataset(data_dir, splits=[])
    compression_type = contract.tf_compression_type(info.manifest)
    damaged = []
    for split, entry in info.manifest["splits"].items():
        for shard, path in zip(entry["shards"], info.shard_paths(split), strict=True):
            problems = shard_problems(path, shard, compression_type)
            if problems:
                damaged.append((path, "; ".join(problems)))
    return damaged


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m reader.verify",
        description="Checks every shard of a dataset against its manifest: size, sha256, "
                    "record count, CRCs and record index. Prints one DAMAGED line per bad "
                    "shard and exits 1, or OK and exits 0.")
    parser.add_argument("data_dir")
    data_dir = parser.parse_args(argv).data_dir
    try:
        damaged = find_damaged_shards(data_dir)
    except (FileNotFoundError, contract.DatasetError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    for path, problem in damaged:
        print(f"DAMAGED {path}: {problem}")
    if not damaged:
        print(f"OK: every shard of {data_dir} matches its manifest.")
    return 1 if damaged else 0


if __name__ == "__main__":
    sys.exit(main())
