"""What a PyTorch DataLoader worker process does with a map-style dataset, without
torch: it receives the dataset pickled, and reads the indices of the batches it was
given. Imports nothing but the TF-free reader, as such a worker would."""

from __future__ import annotations

import os
import pickle
import sys


def read_keys(pickled_dataset: bytes, batches: list[list[int]]) -> tuple[list[str], bool]:
    """The keys of every record in ``batches``, and whether TensorFlow was imported."""
    dataset = pickle.loads(pickled_dataset)
    keys = [dataset[i]["key"] for batch in batches for i in batch]
    return keys, "tensorflow" in sys.modules


def grain_keys(data_dir: str, skip: int, state: dict | None) -> tuple[list[str], dict]:
    """Keys of one epoch of ``MapDataset.source(records).seed(0).shuffle()``: the ones
    after ``skip`` records (restored from ``state`` if given), and the iterator's
    checkpoint after ``skip`` records."""
    import grain

    from reader.records import ShardedRecords

    records = ShardedRecords(data_dir, "train", features=["key"])
    dataset = grain.MapDataset.source(records).seed(0).shuffle().map(lambda r: r["key"])
    iterator = iter(dataset.to_iter_dataset())
    if state is not None:
        iterator.set_state(state)
    else:
        for _ in range(skip):
            next(iterator)
    checkpoint = iterator.get_state()
    return list(iterator), checkpoint


if __name__ == "__main__":
    # python -m tests.reader.records_worker <data_dir> <state json>: prints the keys
    # a fresh process reads after restoring the checkpoint.
    import json

    keys, _ = grain_keys(sys.argv[1], 0, json.loads(sys.argv[2]))
    print(json.dumps({"keys": keys, "pid": os.getpid(),
                      "tensorflow": "tensorflow" in sys.modules}))
