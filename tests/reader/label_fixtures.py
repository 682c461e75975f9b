"""Small image datasets with multi-label sets, numeric targets and carried columns,
written straight from plain Python rows in the on-disk format (docs/FORMAT.md), so
that the reader's side is tested without a job run. Nothing here uses the reader:
ids, counts, statistics and stored targets are computed with Python and numpy."""

from __future__ import annotations

import hashlib
import json
import os

import numpy as np
import tensorflow as tf

IMAGE_SIZE = 8
NUM_SHARDS = 3
NUM_ROWS = 240
TAGS = ["cat", "dog", "outdoor", "night", "sky"]
UNSEEN_TAG = "zebra"  # only outside train: stored with id -1
COLOURS = ["red", "green", "blue"]
TARGET_COLUMNS = ["age", "score"]
CARRIED_COLUMNS = ["image_id", "caption"]


def split_of(index: int) -> str:
    return {4: "validation", 5: "test"}.get(index % 6, "train")


def make_rows(seed: int = 0) -> list[dict]:
    """Rows ``{"key", "split", "index", "tags", "colour", "targets", <carried>}``;
    every fixture uses the fields its task needs."""
    rng = np.random.default_rng(seed)
    rows = []
    for index in range(NUM_ROWS):
        split = split_of(index)
        tags = [tag for tag in TAGS if rng.random() < 0.35]
        if split != "train" and rng.random() < 0.3:
            tags.append(UNSEEN_TAG)
        rows.append({
            "key": f"img/{index:04d}.png", "split": split, "index": index, "tags": tags,
            "colour": COLOURS[int(rng.integers(len(COLOURS)))],
            "targets": [float(rng.uniform(1, 90)), float(rng.normal(5, 2))],
            "image_id": f"id-{index:04d}", "caption": f"Ünïcode caption {index} — ✓"})
    return rows


def pixels(index: int) -> np.ndarray:
    """The solid ``uint8 [8, 8, 3]`` image of row ``index``: its index in its colour."""
    return np.broadcast_to(np.array([index % 256, index // 256, 7], np.uint8),
                           (IMAGE_SIZE, IMAGE_SIZE, 3))


def vocabulary(names_per_train_row: list[list[str]]) -> list[str]:
    counts: dict[str, int] = {}
    for names in names_per_train_row:
        for name in names:
            counts[name] = counts.get(name, 0) + 1
    return sorted(counts, key=lambda name: (-counts[name], name))


def target_stats(rows: list[dict], columns: int) -> tuple[list[float], list[float]]:
    """The train rows' mean and (population) std per target column, in float64."""
    train = np.array([row["targets"][:columns] for row in rows if row["split"] == "train"])
    return train.mean(axis=0).tolist(), train.std(axis=0).tolist()


def stored_targets(row: dict, targets: dict | None) -> list[float]:
    """What the job stores as ``target``: float32 of ``(raw - mean) / std``."""
    raw = np.array(row["targets"][:len(targets["columns"])], np.float64)
    if targets["normalize"] == "zscore":
        raw = (raw - np.array(targets["mean"])) / np.array(targets["std"])
    return raw.astype(np.float32).tolist()


def _names(row: dict, task: str) -> list[str]:
    return list(row["tags"]) if task == "multi_label" else [row["colour"]]


def _example(row: dict, task: str, vocab: list[str], targets: dict | None,
             carried: list[str]) -> bytes:
    def strings(*values: str) -> tf.train.Feature:
        return tf.train.Feature(bytes_list=tf.train.BytesList(
            value=[v.encode() for v in values]))

    feature = {"image": tf.train.Feature(bytes_list=tf.train.BytesList(
                   value=[pixels(row["index"]).tobytes()])),
               "key": strings(row["key"])}
    if task != "regression":
        # Ids ascending (-1, a class not in train, first), names in the same order.
        pairs = sorted((vocab.index(n) if n in vocab else -1, n) for n in _names(row, task))
        feature["label"] = tf.train.Feature(int64_list=tf.train.Int64List(
            value=[i for i, _ in pairs]))
        feature["label_name"] = strings(*[n for _, n in pairs])
    if targets is not None:
        feature["target"] = tf.train.Feature(float_list=tf.train.FloatList(
            value=stored_targets(row, targets)))
    for column in carried:
        feature[column] = strings(row[column])
    return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()


def _features(task: str, targets: dict | None, carried: list[str]) -> dict:
    def fixed(dtype: str, shape: list[int]) -> dict:
        return {"kind": "fixed_len", "dtype": dtype, "shape": shape}

    features = {"image": fixed("string", []), "key": fixed("string", [])}
    if task == "classification":
        features |= {"label": fixed("int64", []), "label_name": fixed("string", [])}
    elif task == "multi_label":
        features |= {"label": {"kind": "var_len", "dtype": "int64"},
                     "label_name": {"kind": "var_len", "dtype": "string"}}
    if targets is not None:
        features["target"] = fixed("float32", [len(targets["columns"])])
    return features | {column: fixed("string", []) for column in carried}


def _write_split(out: str, split: str, records: list[bytes]) -> dict:
    shards = []
    count = min(NUM_SHARDS, len(records))
    for index in range(count):
        path = f"{split}/labels-{split}-{index:05d}-of-{count:05d}.tfrecord.gz"
        os.makedirs(os.path.join(out, split), exist_ok=True)
        part = records[index::count]
        with tf.io.TFRecordWriter(os.path.join(out, path), options="GZIP") as writer:
            for record in part:
                writer.write(record)
        with open(os.path.join(out, path), "rb") as f:
            data = f.read()
        shards.append({"path": path, "num_records": len(part), "num_bytes": len(data),
                       "sha256": hashlib.sha256(data).hexdigest()})
    return {"num_records": len(records), "shards": shards,
            "num_bytes": sum(shard["num_bytes"] for shard in shards)}


def write_dataset(out: str, rows: list[dict], task: str, num_targets: int = 0,
                  normalize: str = "zscore", carried: tuple[str, ...] = ()) -> dict:
    """Writes ``rows`` as a finished dataset of ``task`` under ``out``; returns its
    manifest. ``num_targets`` of :data:`TARGET_COLUMNS` become the ``target``."""
    vocab = [] if task == "regression" else vocabulary(
        [_names(row, task) for row in rows if row["split"] == "train"])
    targets = None
    if num_targets:
        targets = {"columns": TARGET_COLUMNS[:num_targets], "normalize": normalize}
        if normalize == "zscore":
            targets["mean"], targets["std"] = target_stats(rows, num_targets)
    manifest = {"format_version": 1, "name": "labels", "kind": "images", "task": task,
                "features": _features(task, targets, list(carried)), "label_vocab": vocab,
                "label_counts": {}, "splits": {},
                "preprocessing": {"image_size": IMAGE_SIZE, "image_format": "raw"}}
    for split in ("train", "validation", "test"):
        in_split = [row for row in rows if row["split"] == split]
        counts: dict[str, int] = {}
        for row in in_split if task != "regression" else []:
            for name in set(_names(row, task)):
                counts[name] = counts.get(name, 0) + 1
        manifest["label_counts"][split] = counts
        manifest["splits"][split] = _write_split(
            out, split, [_example(row, task, vocab, targets, list(carried))
                         for row in in_split])
    if targets is not None:
        manifest["targets"] = targets
    if carried:
        manifest["carried_columns"] = list(carried)
    with open(os.path.join(out, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=2, sort_keys=True, ensure_ascii=False)
    return manifest


def multi_hot(names: list[str], vocab: list[str]) -> list[float]:
    """A plain-Python set → multi-hot over ``vocab`` (names not in it ignored)."""
    held = set(names)
    return [1.0 if name in held else 0.0 for name in vocab]
