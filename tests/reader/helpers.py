"""Constants and helpers shared by the reader tests and their fixtures (conftest.py)."""

from __future__ import annotations

import json
import os

import numpy as np
import tensorflow as tf

import reader

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# Class → number of images; imbalanced on purpose (balance tests).
CLASS_SIZES = {"red": 48, "green": 24, "blue": 12}
BASE_COLOURS = {"red": (200, 30, 30), "green": (30, 200, 30), "blue": (30, 30, 200)}
NUM_SHARDS = 4

# Forecast fixture: series "ramp" holds value t at timestamp t, so a de-normalised
# window starting at timestamp t is exactly [t, t+1, ...].
RAMP_LENGTH = 80
FORECAST_WINDOW = 6
FORECAST_HORIZON = 2

# Classification fixture: rising series are "up", falling ones "down".
LABELLED_SERIES = 12
LABELLED_WINDOW = 5


def write_coloured_images(root: str) -> int:
    """Solid images whose colour tells the class (learnable by a tiny model)."""
    rng = np.random.default_rng(0)
    total = 0
    for label, count in CLASS_SIZES.items():
        os.makedirs(os.path.join(root, label), exist_ok=True)
        for i in range(count):
            rgb = np.clip(np.array(BASE_COLOURS[label]) + rng.integers(-25, 26, 3), 0, 255)
            image = np.broadcast_to(rgb.astype(np.uint8), (20, 24, 3))
            tf.io.write_file(os.path.join(root, label, f"{i:03d}.png"),
                             tf.io.encode_png(image))
            total += 1
    return total


def write_jsonl(path: str, rows: list[dict]) -> str:
    with open(path, "w") as f:
        f.writelines(json.dumps(row) + "\n" for row in rows)
    return path


def series_label(series_id: str) -> str:
    return "down" if int(series_id[1:]) % 3 == 0 else "up"


def manifest_keys(data_dir: str, split: str) -> list[str]:
    """The keys stored in a split, read with plain tf.data, sorted."""
    info = reader.open_dataset(data_dir)
    spec = {"key": info.feature_spec["key"]}
    records = tf.data.TFRecordDataset(info.shard_paths(split), compression_type="GZIP")
    return sorted(tf.io.parse_single_example(r, spec)["key"].numpy().decode()
                  for r in records)


def first_train_shard(data_dir: str) -> str:
    return reader.open_dataset(data_dir).shard_paths("train")[0]


def flip_byte_in_middle(path: str) -> None:
    with open(path, "rb") as f:
        data = bytearray(f.read())
    data[len(data) // 2] ^= 0xFF
    with open(path, "wb") as f:
        f.write(bytes(data))
