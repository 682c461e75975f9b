"""Full integrity check of a dataset: every shard's hash, record count and CRCs.

tf.data reports a corrupt record as ``DataLossError: corrupted record at <offset>``
without naming the file (interleave mixes shards). When training hits that error, run

    python -m reader.verify <data_dir>

which names each damaged shard and exits non-zero.
"""

from __future__ import annotations

import sys

import tensorflow as tf

from etl import contract
from reader.dataset_info import DatasetError, check_shards, open_dataset


def _count_records(path: str, skip_errors: bool = False) -> int:
    dataset = tf.data.TFRecordDataset(path, compression_type=contract.COMPRESSION)
    if skip_errors:
        dataset = dataset.apply(tf.data.experimental.ignore_errors())
    return int(dataset.reduce(tf.constant(0, tf.int64), lambda n, _: n + 1))


def find_damaged_shards(data_dir: str) -> list[tuple[str, str]]:
    """``(shard path, problem)`` for every shard that fails a check; [] if all pass.

    Checks existence, size and sha256 against the manifest, then reads every record
    (TFRecord CRCs and GZIP framing) and compares the record count.

    Raises:
        FileNotFoundError: no manifest (the job did not finish).
    """
    info = open_dataset(data_dir, splits=[])
    damaged: list[tuple[str, str]] = []
    for split, entry in info.manifest["splits"].items():
        for shard, path in zip(entry["shards"], info.shard_paths(split), strict=True):
            problems = []
            try:
                # One shard at a time, so a failure names exactly this file.
                check_shards({"splits": {split: {"shards": [shard]}}}, data_dir, [split],
                             verify=True)
            except DatasetError as e:
                problems.append(str(e))
                if not tf.io.gfile.exists(path):
                    damaged.append((path, problems[0]))
                    continue
            expected = shard["num_records"]
            try:
                count = _count_records(path)
            except (tf.errors.DataLossError, tf.errors.InvalidArgumentError) as e:
                readable = _count_records(path, skip_errors=True)
                problems.append(f"unreadable record ({e.message.strip()[:120]}); "
                                f"{readable} of {expected} records readable")
            else:
                if count != expected:
                    problems.append(f"holds {count} records, manifest says {expected}")
            if problems:
                damaged.append((path, " ".join(problems)))
    return damaged


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m reader.verify <data_dir>", file=sys.stderr)
        return 2
    damaged = find_damaged_shards(args[0])
    for path, problem in damaged:
        print(f"DAMAGED {path}: {problem}")
    if not damaged:
        print(f"OK: every shard of {args[0]} matches its manifest.")
    return 1 if damaged else 0


if __name__ == "__main__":
    sys.exit(main())
