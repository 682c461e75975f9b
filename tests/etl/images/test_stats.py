"""WriteImageStatistics on literal facts: what is counted, what is left out, what is flagged."""

from __future__ import annotations

import json

import apache_beam as beam
from apache_beam.testing.test_pipeline import TestPipeline

from etl.core.run.versions import FIRST_VERSION
from etl.core.shards.removal import Removal
from etl.core.shards.step import ShardFacts
from etl.images import facts, quality
from etl.images import stats as image_stats
from etl.images.labels import ONE_CLASS
from reader.format import contract
from reader.stats import files as stats_files

CLEAN = {"width": 640, "height": 480, "orientation": 1, "file_bytes": 50_000,
         "megapixels": 0.3072, "aspect_ratio": 1.333333, "format": "jpeg", "mode": "RGB",
         "brightness": 0.5, "brightness_p5": 0.1, "brightness_p99": 0.9,
         "contrast": 0.2, "sharpness": 60.0, "entropy": 7.0, "chroma": 0.3}


def fact(key: str, label: str, **changes) -> dict:
    return {"key": key, "source": f"/in/{key}", "labels": [label], **CLEAN, **changes}


def test_kept_facts_leaves_out_exactly_the_removed_positions():
    element = ShardFacts("train", 3, tuple(fact(f"k{i}", "cat") for i in range(5)))
    kept = image_stats.kept_facts(element, {("train", 3): (1, 4), ("test", 3): (0,)})
    assert [f["key"] for f in kept.facts] == ["k0", "k2", "k3"]
    assert image_stats.kept_facts(element, {}) is element


def test_flag_lines_name_the_flags_and_their_values():
    element = ShardFacts("test", 0, (fact("dark", "cat", brightness_p99=0.1),
                                     fact("ok", "dog"),
                                     fact("wide", "dog", width=2000, height=400)))
    lines = image_stats.flag_lines(element, (100.0, 1000.0), ONE_CLASS,
                                quality.FlagThresholds())
    assert lines == (
        {"key": "dark", "split": "test", "label": "cat", "flags": ["dark"],
         "values": {"dark": 0.1}},
        {"key": "wide", "split": "test", "label": "dog", "flags": ["odd_aspect_ratio"],
         "values": {"odd_aspect_ratio": 0.2}})


def test_write_image_statistics_leaves_out_removed_records_and_writes_sorted_flags(tmp_path):
    shards = [ShardFacts("train", 0, (fact("b", "cat"), fact("a", "dog", brightness_p99=0.1))),
              ShardFacts("train", 1, (fact("c", "cat"), fact("d", "cat"))),
              ShardFacts("test", 0, (fact("e", "dog", mode="L"),))]
    removals = [Removal("train", 1, (0,), ("cat",))]
    out = str(tmp_path)
    with TestPipeline() as pipeline:
        inputs = {"facts": pipeline | "Facts" >> beam.Create(shards),
                  "removals": pipeline | "Removals" >> beam.Create(removals)}
        _ = inputs | image_stats.WriteImageStatistics(out, FIRST_VERSION, ONE_CLASS)
    datasets = stats_files.read_split_statistics(out)
    assert {split: d.num_examples for split, d in datasets.items()} == {"train": 3, "test": 1}
    label = stats_files.feature_stats(datasets["train"], facts.LABEL_FEATURE)
    assert {b.label: b.sample_count for b in label.string_stats.rank_histogram.buckets} == {
        "cat": 2, "dog": 1}
    lines = (tmp_path / "statistics" / contract.FLAGS_FILENAME).read_text().splitlines()
    assert [(line["key"], line["flags"]) for line in map(json.loads, lines)] == [
        ("a", ["dark"]), ("e", ["grayscale"])]
