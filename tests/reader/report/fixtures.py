"""Datasets for the report's tests, written straight in the on-disk format (no job run).

An image dataset: ``label_fixtures.write_dataset``'s classification rows (8 px raw
images whose pixels encode the row index), with hand-built statistics protos in
one-record TFRecord files (a source ``width`` whose histogram holds fractional
counts, as a quantiles sketch gives them), a literal ``drift.json`` (some
comparisons not judged) and ``flags.jsonl``, a duplicate summary and pairs, and the
run's settings and library versions in the manifest. A time-series dataset: one
series ``ramp`` whose row ``t`` holds ``10 + 2 t`` (column ``level``), cut into
windows stored z-scored, as the time-series job stores them.
"""

from __future__ import annotations

import hashlib
import json
import os

import numpy as np
import tensorflow as tf
from tensorflow_metadata.proto.v0 import statistics_pb2

from tests.reader.label_fixtures import make_rows, write_dataset

FloatType = statistics_pb2.FeatureNameStatistics.FLOAT
StringType = statistics_pb2.FeatureNameStatistics.STRING

# drift.json as a job might write it, deliberately not over-first, so the report's
# own order shows.
DRIFT = [
    {"split": "validation", "baseline": "train", "feature": "brightness",
     "comparator": "jensen_shannon_divergence", "distance": 0.0123, "threshold": 0.1,
     "over": False},
    {"split": "test", "baseline": "train", "feature": "label",
     "comparator": "infinity_norm", "distance": 0.05, "threshold": 0.1, "over": False},
    {"split": "test", "baseline": "train", "feature": "brightness",
     "comparator": "jensen_shannon_divergence", "distance": 0.4321, "threshold": 0.1,
     "over": True},
]
# Comparisons with too few examples on a side: summed up in one line, never a row each.
DRIFT_UNJUDGED = [
    {"split": split, "baseline": "train", "feature": feature, "comparator": comparator,
     "distance": 0.5, "threshold": 0.1, "over": False, "judged": False}
    for split, feature, comparator in (
        ("validation", "width", "jensen_shannon_divergence"),
        ("test", "width", "jensen_shannon_divergence"),
        ("test", "mode", "infinity_norm"))]
# Flagged images: three stored ones (make_rows: index % 6 == 4 validation, 5 test) and
# one key no shard holds, whose text must come out escaped.
FLAGS = [
    {"key": "<b>missing</b>.png", "split": "train", "label": "red", "flags": ["blurry"],
     "values": {"blurry": 12.5}},
    {"key": "img/0000.png", "split": "train", "label": "red", "flags": ["dark", "grayscale"],
     "values": {"dark": 0.125, "grayscale": "L"}},
    {"key": "img/0004.png", "split": "validation", "label": None,
     "flags": ["low_information"], "values": {"low_information": 1.5849}},
    {"key": "img/0011.png", "split": "test", "label": ["a", "b"], "flags": ["odd_size"],
     "values": {"odd_size": 8}},
]
DUPLICATES = {"mode": "report", "images": 240, "blank_images": 3, "cross_split_pairs": 7,
              "exact_groups": {"groups": 2, "images": 5, "cross_split": 1},
              "label_disagreements": {"bytes": 0, "near": 1, "pixels": 0},
              "pairs": {"near": {"train-test": 4, "train-train": 2}},
              "removed": {"test": 0, "train": 0, "validation": 0}}

# duplicates/pairs.jsonl (make_rows: index % 6 == 4 validation, 5 test, else train;
# colours as make_rows draws them): three pairs across splits, one of them with a
# copy no shard holds (removed), and one within train, which the report leaves out.
PAIRS = [
    {"kind": "bytes", "distance": 0, "key_a": "img/0005.png", "split_a": "test",
     "key_b": "img/0000.png", "split_b": "train"},
    {"kind": "near", "distance": 3, "key_a": "img/0004.png", "split_a": "validation",
     "key_b": "img/0001.png", "split_b": "train"},
    {"kind": "near", "distance": 1, "key_a": "img/0002.png", "split_a": "train",
     "key_b": "img/0003.png", "split_b": "train"},
    {"kind": "near", "distance": 2, "key_a": "img/0011.png", "split_a": "test",
     "key_b": "<i>gone</i>.png", "split_b": "validation"},
]
SETTINGS = {"split_fractions": {"test": 0.1, "train": 0.8, "validation": 0.1},
            "labels": {"label_column": "label", "multi_label": False},
            "resize": "shorter side to image_size, then centre crop image_size x image_size"}
VERSIONS = {"python": "3.11.7", "tensorflow": "2.21.0", "tensorflow_transform": "1.21.0",
            "apache_beam": "2.77.0", "isal": "1.9.1"}
WIDTH_BUCKETS = [(100.0, 200.0, 37.6), (200.0, 300.0, 0.01429), (300.0, 400.0, 12.0)]

SERIES_LENGTH = 40
SERIES_WINDOW = 4
SERIES_HORIZON = 1
SERIES_MEAN, SERIES_STD = 49.0, 23.0


def numeric_feature(name: str, values: np.ndarray) -> statistics_pb2.FeatureNameStatistics:
    """A FLOAT feature's statistics computed with NumPy: 4 equal-width buckets."""
    counts, edges = np.histogram(values, bins=4)
    feature = statistics_pb2.FeatureNameStatistics(type=FloatType)
    feature.path.step.append(name)
    stats = feature.num_stats
    stats.common_stats.num_non_missing = len(values)
    stats.mean, stats.std_dev = float(values.mean()), float(values.std())
    stats.min, stats.median, stats.max = (float(values.min()), float(np.median(values)),
                                          float(values.max()))
    histogram = stats.histograms.add(type=statistics_pb2.Histogram.STANDARD)
    for low, high, count in zip(edges[:-1], edges[1:], counts, strict=True):
        histogram.buckets.add(low_value=low, high_value=high, sample_count=count)
    return feature


def string_feature(name: str, counts: dict[str, int]) -> statistics_pb2.FeatureNameStatistics:
    feature = statistics_pb2.FeatureNameStatistics(type=StringType)
    feature.path.step.append(name)
    stats = feature.string_stats
    stats.common_stats.num_non_missing = sum(counts.values())
    stats.unique = len(counts)
    for value, count in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])):
        stats.top_values.add(value=value, frequency=count)
    return feature


def write_statistics(out: str, relpath: str,
                     dataset: statistics_pb2.DatasetFeatureStatistics) -> None:
    """``dataset`` as ``tfdv.load_statistics`` reads it: a one-record TFRecord file."""
    path = os.path.join(out, relpath)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    record = statistics_pb2.DatasetFeatureStatisticsList(datasets=[dataset])
    with tf.io.TFRecordWriter(path) as writer:
        writer.write(record.SerializeToString())


def brightness(manifest: dict, split: str, shift: float = 0.0) -> np.ndarray:
    """The brightness of each record of a split, train darker by ``shift``."""
    base = np.linspace(0.2, 0.8, manifest["splits"][split]["num_records"])
    return base - (shift if split == "train" else 0.0)


def width_feature(num_examples: int) -> statistics_pb2.FeatureNameStatistics:
    """The source files' ``width``: its STANDARD histogram :data:`WIDTH_BUCKETS`, and
    a QUANTILES one (what drift compares), the same in every split and dataset."""
    feature = numeric_feature("width", np.linspace(100.0, 400.0, num_examples))
    histogram = feature.num_stats.histograms[0]
    quantiles = feature.num_stats.histograms.add(type=statistics_pb2.Histogram.QUANTILES)
    quantiles.CopyFrom(histogram)
    quantiles.type = statistics_pb2.Histogram.QUANTILES
    del histogram.buckets[:]
    for low, high, count in WIDTH_BUCKETS:
        histogram.buckets.add(low_value=low, high_value=high, sample_count=count)
    return feature


def write_image_dataset(out: str, shift: float = 0.0, with_extras: bool = True) -> dict:
    """The image dataset; ``with_extras``: statistics, drift, flags, duplicates, and
    settings and versions in the manifest."""
    manifest = write_dataset(out, make_rows(), "classification")
    if not with_extras:
        return manifest
    manifest["preprocessing"].update(SETTINGS)
    manifest["versions"] = VERSIONS
    with open(os.path.join(out, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=2, sort_keys=True)
    for split, counts in manifest["label_counts"].items():
        dataset = statistics_pb2.DatasetFeatureStatistics(
            name=split, num_examples=manifest["splits"][split]["num_records"])
        dataset.features.append(numeric_feature("brightness",
                                                brightness(manifest, split, shift)))
        dataset.features.append(string_feature("label", counts))
        dataset.features.append(width_feature(dataset.num_examples))
        write_statistics(out, f"statistics/{split}.tfrecord", dataset)
    with open(os.path.join(out, "statistics", "drift.json"), "w") as f:
        json.dump(DRIFT + DRIFT_UNJUDGED, f)
    with open(os.path.join(out, "statistics", "flags.jsonl"), "w") as f:
        f.writelines(json.dumps(entry) + "\n" for entry in FLAGS)
    os.makedirs(os.path.join(out, "duplicates"))
    with open(os.path.join(out, "duplicates", "summary.json"), "w") as f:
        json.dump(DUPLICATES, f)
    colours = {row["key"]: row["colour"] for row in make_rows()}
    with open(os.path.join(out, "duplicates", "pairs.jsonl"), "w") as f:
        f.writelines(json.dumps({**pair, "label_a": colours.get(pair["key_a"]),
                                 "label_b": colours.get(pair["key_b"], "red")}) + "\n"
                     for pair in PAIRS)
    return manifest


def series_values() -> np.ndarray:
    """Row ``t`` of the series ``ramp``, in the input's units."""
    return 10.0 + 2.0 * np.arange(SERIES_LENGTH)


def _window_example(start: int) -> bytes:
    values = series_values()
    z = (values - SERIES_MEAN) / SERIES_STD
    window = z[start:start + SERIES_WINDOW]
    target = z[start + SERIES_WINDOW:start + SERIES_WINDOW + SERIES_HORIZON]

    def text(value: str) -> tf.train.Feature:
        return tf.train.Feature(bytes_list=tf.train.BytesList(value=[value.encode()]))

    feature = {"window": tf.train.Feature(float_list=tf.train.FloatList(value=window)),
               "target": tf.train.Feature(float_list=tf.train.FloatList(value=target)),
               "series_id": text("ramp"), "window_start": text(str(start)),
               "key": text(f"ramp@{start}")}
    return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()


def write_series_dataset(out: str) -> dict:
    """Series ``ramp`` split in time: rows 0-27 train, 28-33 validation, 34-39 test;
    each piece cut into every window of 4 rows and 1 target row (shift 1)."""
    pieces = {"train": (0, 28), "validation": (28, 34), "test": (34, 40)}
    span = SERIES_WINDOW + SERIES_HORIZON
    splits = {}
    for split, (first, end) in pieces.items():
        # Stored out of time order, as the job's hash order would.
        starts = sorted(range(first, end - span + 1), key=lambda s: (s * 7) % 11)
        path = f"{split}/series-{split}-00000-of-00001.tfrecord.gz"
        os.makedirs(os.path.join(out, split), exist_ok=True)
        with tf.io.TFRecordWriter(os.path.join(out, path), options="GZIP") as writer:
            for start in starts:
                writer.write(_window_example(start))
        with open(os.path.join(out, path), "rb") as f:
            data = f.read()
        splits[split] = {"num_records": len(starts), "num_bytes": len(data), "shards": [
            {"path": path, "num_records": len(starts), "num_bytes": len(data),
             "sha256": hashlib.sha256(data).hexdigest()}]}
    fixed = {"kind": "fixed_len", "dtype": "float32"}
    text = {"kind": "fixed_len", "dtype": "string", "shape": []}
    manifest = {
        "format_version": 1, "name": "series", "kind": "timeseries", "task": "forecast",
        "features": {"window": {**fixed, "shape": [SERIES_WINDOW, 1]},
                     "target": {**fixed, "shape": [SERIES_HORIZON, 1]},
                     "series_id": text, "window_start": text, "key": text},
        "label_vocab": [], "label_counts": {s: {} for s in pieces}, "splits": splits,
        "normalisation": {"per_series": False, "mean": [SERIES_MEAN], "std": [SERIES_STD]},
        "timeseries": {"window_size": SERIES_WINDOW, "horizon": SERIES_HORIZON, "shift": 1,
                       "stride": 1, "value_columns": ["level"]},
        "rejected": {"count": 2, "by_reason": {"malformed_row": 2}, "examples": {
            "malformed_row": [{"key": "rows.csv:3", "message": "3 fields, expected <4>"}]}}}
    with open(os.path.join(out, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=2, sort_keys=True)
    return manifest


def read(path: str) -> str:
    """A written page's text."""
    with open(path, encoding="utf-8") as f:
        return f.read()
