"""The report's run settings, duplicate pairs, drift summary, counts, source sizes,
sections per kind of dataset and series channels."""

from __future__ import annotations

import re

import numpy as np

from reader.report import build as report
from reader.report import gallery as report_gallery
from reader.report import series as report_series
from reader.report import svg as report_svg
from tests.reader.label_fixtures import make_rows, pixels, write_dataset
from tests.reader.report import fixtures as report_fixtures
from tests.reader.report.fixtures import read
from tests.reader.report.test_report import IMAGE_SECTIONS, decoded, section, sections


def test_report_drift_sums_up_comparisons_not_judged_in_one_line(image_page):
    drift = section(image_page, "drift")
    assert "not judged</td>" not in drift and "<td>width</td>" not in drift
    assert re.findall(r'<p class="note unjudged">(.*?)</p>', drift) == [(
        "3 not judged: test vs train (2 features), validation vs train (1 feature). A "
        "side has fewer than 100 examples, too few for a distance to mean drift; every "
        "distance is in statistics/drift.json.")]


def test_report_settings_show_the_run_and_library_versions(image_page):
    settings = section(image_page, "settings")
    rows = dict(re.findall(r"<tr><td>([\w.]+)</td><td[^>]*>([^<]*)</td></tr>", settings))
    assert rows["image_size"] == "8" and rows["image_format"] == "raw"
    assert rows["split_fractions"] == "train 0.8, validation 0.1, test 0.1"
    assert rows["labels.label_column"] == "label" and rows["labels.multi_label"] == "false"
    assert rows["tensorflow"] == "2.21.0" and rows["apache_beam"] == "2.77.0"
    # A rule in words is folded away, not a row of the settings' table.
    assert re.search(r"<details><summary>The rules in words \(1\)</summary>.*"
                     r"<td>resize</td><td>shorter side", settings, re.S)


def test_report_features_say_sizes_are_the_source_files(image_page):
    features = section(image_page, "features")
    assert ("width <span class=\"type\">FLOAT</span> <span class=\"about\">the source "
            "file&#x27;s width in pixels (upright), before resizing</span>") in features
    assert ("width, height, megapixels, aspect_ratio and file_bytes are the source "
            "files'; every stored image is 8 x 8 raw") in features
    assert "brightness <span class=\"type\">FLOAT</span></h3>" in features


def test_report_counts_are_whole_numbers_of_examples(image_page):
    features = section(image_page, "features")
    width = features[features.index("width <span"):]
    titles = re.findall(r"<title>([^<]*)</title>", width)[:3]
    assert titles == ["100 to 200: ≈38 examples", "200 to 300: &lt;1 example",
                      "300 to 400: 12 examples"]
    counts = re.findall(r"<title>[^<]*: ([^<]*) examples?</title>", image_page)
    assert counts and all(re.fullmatch(r"(&lt;1|≈?\d[\d,]*)", c) for c in counts)


def test_count_shows_whole_numbers():
    assert [report_svg.count(v) for v in (3.0, 1234.0, 0.01429, 0.5, 2.5, 1234.4)] == [
        "3", "1,234", "<1", "≈1", "≈3", "≈1,234"]


def test_report_duplicates_show_each_pair_across_splits_side_by_side(image_page):
    duplicates = section(image_page, "duplicates")
    assert "<h3>Pairs across splits (3)</h3>" in duplicates
    pairs = re.findall(r'<div class="pair"><p>(.*?)</p><div class="grid">(.*?)</div></div>',
                       duplicates, re.S)
    # Strongest kind first, then the smallest distance; the pair within train is not one.
    assert [head for head, _ in pairs] == [
        "bytes, distance 0", 'near, distance 2 <span class="flags">labels differ</span>',
        'near, distance 3 <span class="flags">labels differ</span>']
    shown = [re.findall(r'<img src="([^"]+)" alt="([^"]+)">', figures) for _, figures in pairs]
    assert [[key for _, key in images] for images in shown] == [
        ["img/0005.png", "img/0000.png"], ["img/0011.png"], ["img/0004.png", "img/0001.png"]]
    for images in shown:
        for uri, key in images:
            assert np.array_equal(decoded(uri), pixels(int(key[4:8])))
    # The copy no shard holds is named, escaped, without an image.
    assert "&lt;i&gt;gone&lt;/i&gt;.png\nvalidation\nred (not found in the shards)" in pairs[1][1]


def test_pairs_of_a_dropping_run_say_the_copy_is_removed():
    pair = {**report_fixtures.PAIRS[3], "label_a": "blue", "label_b": "red"}
    shown = report_gallery.pairs_html(report_gallery.CrossSplitPairs([pair], 1), None,
                                      "duplicates/pairs.jsonl", dropped=True)
    assert "&lt;i&gt;gone&lt;/i&gt;.png\nvalidation\nred (removed from the dataset)" in shown


def test_report_duplicate_pairs_beyond_the_cap_are_counted(image_dataset, tmp_path,
                                                          monkeypatch):
    monkeypatch.setattr(report_gallery, "MAX_PAIRS_SHOWN", 1)
    duplicates = section(read(report.write_report(image_dataset, str(tmp_path / "r.html"))),
                         "duplicates")
    assert len(re.findall(r'<div class="pair">', duplicates)) == 1
    assert ("2 more pairs are not shown: every pair is in duplicates/pairs.jsonl"
            in duplicates)


def test_report_of_a_series_has_only_the_sections_that_apply(series_page):
    assert sections(series_page) == ["counts", "settings", "features", "drift", "rejected",
                                     "samples"]
    assert "windowing" not in section(series_page, "settings")  # the fixture has none


def test_report_of_images_without_classes_has_no_labels_section(tmp_path):
    write_dataset(str(tmp_path / "targets"), make_rows(), "regression", num_targets=1)
    page = read(report.write_report(str(tmp_path / "targets")))
    assert sections(page) == [s for s in IMAGE_SECTIONS if s != "labels"]


def test_report_names_series_channels_by_column_and_role(series_page):
    assert re.findall(r"<h3>(ramp: [^<]*)</h3>", section(series_page, "samples")) == [
        "ramp: level (target)"]


def test_series_channels_with_column_roles_follow_the_window_block():
    roles = {"targets": ["level"], "past": ["unemp"], "known": ["infl"],
             "statistics_columns": ["level", "unemp", "infl"], "target_transform": "none",
             "blocks": {"window": {"channels": ["level", "unemp"], "shape": [8, 2]}}}
    manifest = {"task": "forecast", "preprocessing": {"column_roles": roles},
                "timeseries": {"value_columns": ["level", "unemp", "infl"]},
                "normalisation": {"per_series": False, "mean": [1.0, 2.0, 3.0],
                                  "std": [10.0, 20.0, 30.0]}}
    assert report_series.channel_names(manifest, 2) == ["level (target)", "unemp (past)"]
    mean, std, units = report_series._denormaliser(manifest, 2)
    assert mean.tolist() == [1.0, 2.0] and std.tolist() == [10.0, 20.0] and units == "input"
    plain = {"task": "classification", "timeseries": {"value_columns": ["a", "b"]}}
    assert report_series.channel_names(plain, 2) == ["a (value)", "b (value)"]
    assert report_series.channel_names(plain, 3) == ["value 0", "value 1", "value 2"]
