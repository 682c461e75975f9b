"""python -m reader.report: the self-contained HTML report of a dataset."""

from __future__ import annotations

import base64
import io
import json
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest
from PIL import Image

from reader.format import contract
from reader.format.contract import DatasetError
from reader.records import load_manifest
from reader.report import build as report
from reader.report import gallery as report_gallery
from reader.report import samples as report_samples
from tests.reader.helpers import REPO_ROOT
from tests.reader.label_fixtures import TAGS, make_rows, pixels, write_dataset
from tests.reader.report import fixtures as report_fixtures
from tests.reader.report.fixtures import read


def section(page: str, section_id: str) -> str:
    match = re.search(rf'<section id="{section_id}">(.*?)</section>', page, re.S)
    assert match, f"no section {section_id}"
    return match.group(1)


def decoded(uri: str) -> np.ndarray:
    kind, data = uri.split(",", 1)
    assert kind in ("data:image/png;base64", "data:image/jpeg;base64")
    return np.asarray(Image.open(io.BytesIO(base64.b64decode(data))).convert("RGB"))


IMAGE_SECTIONS = ["counts", "settings", "labels", "features", "drift", "duplicates",
                  "rejected", "samples", "flags"]


def sections(page: str) -> list[str]:
    return re.findall(r'<section id="([^"]+)"', page)


def test_report_writes_every_section_once(image_dataset, image_page):
    assert image_page.startswith("<!DOCTYPE html>")
    assert sections(image_page) == IMAGE_SECTIONS


def test_report_loads_nothing_from_anywhere(image_page):
    assert not re.search(r"https?://", image_page)
    assert "<script" not in image_page and "<link rel=\"stylesheet\"" not in image_page
    sources = re.findall(r'\ssrc="([^"]*)"', image_page)
    assert sources and all(s.startswith("data:image/") for s in sources)
    assert all(h.startswith(("#", "data:")) for h in re.findall(r'\shref="([^"]*)"',
                                                                 image_page))


def test_report_counts_records_and_rejected_per_split(image_dataset, image_page):
    rows = make_rows()
    counts = section(image_page, "counts")
    for split in contract.SPLITS:
        expected = sum(1 for row in rows if row["split"] == split)
        assert re.search(rf"<td>{split}</td><td class=\"n\">{expected}</td>", counts)
    assert "rejected 0" in counts


def test_report_labels_side_by_side(image_page):
    rows = make_rows()
    labels = section(image_page, "labels")
    header = re.search(r"<tr>(<th>.*?)</tr>", labels).group(1)
    assert re.findall(r"<th>(.*?)</th>", header) == ["label", "train", "validation", "test"]
    for colour in ("red", "green", "blue"):
        cells = re.search(rf"<tr><td>{colour}</td>(.*?)</tr>", labels).group(1)
        shown = [int(n) for n in re.findall(r"<td>(\d+) \(", cells)]
        assert shown == [sum(1 for r in rows if r["split"] == split and r["colour"] == colour)
                         for split in contract.SPLITS]


def test_report_features_show_statistics_and_histograms(image_dataset, image_page):
    features = section(image_page, "features")
    train = report_fixtures.brightness(load_manifest(image_dataset), "train")
    row = re.search(r"<tr><th>train</th>(.*?)</tr>", features).group(1)
    cells = re.findall(r"<td[^>]*>(.*?)</td>", row)
    assert cells[:7] == [str(len(train)), "0", f"{train.mean():.4g}", f"{train.std():.4g}",
                         f"{train.min():.4g}", f"{np.median(train):.4g}", f"{train.max():.4g}"]
    bars = re.findall(r'<rect x="[^"]+" y="[^"]+" width="[^"]+" height="([^"]+)"', cells[7])
    counts, _ = np.histogram(train, bins=4)
    assert [float(h) for h in bars] == pytest.approx(38 * counts / counts.max(), abs=0.05)
    assert ">red</text>" in features  # the label's top values


def test_report_drift_lists_rows_over_threshold_first(image_page):
    drift = section(image_page, "drift")
    rows = re.findall(r"<tr( class=\"over\")?><td>(\w+)</td><td>\w+</td><td>(\w+)</td>", drift)
    assert rows == [(' class="over"', "test", "brightness"), ("", "test", "label"),
                    ("", "validation", "brightness")]
    assert "1 of 3 judged over their threshold" in drift







def test_report_duplicates_headline(image_page):
    duplicates = section(image_page, "duplicates")
    assert re.search(r"<td>pairs across splits</td><td class=\"n\">7</td>", duplicates)
    assert re.search(r"<td>blank images</td><td class=\"n\">3</td>", duplicates)





def test_report_samples_few_images_per_class_from_the_shards(image_page):
    samples = section(image_page, "samples")
    rows = {row["key"]: row for row in make_rows()}
    for colour in ("red", "green", "blue"):
        block = re.search(rf"<h3>{colour}</h3>(.*?)(<h3>|$)", samples, re.S).group(1)
        found = re.findall(r'<img src="([^"]+)" alt="([^"]+)">', block)
        assert len(found) == report_samples.SAMPLES_PER_CLASS
        for uri, key in found:
            assert rows[key]["colour"] == colour and rows[key]["split"] == "train"
            assert np.array_equal(decoded(uri), pixels(rows[key]["index"]))


def test_report_flags_every_flagged_image_with_its_flags(image_page):
    flags = section(image_page, "flags")
    figures = re.findall(r"<figure>(.*?)</figure>", flags, re.S)
    assert len(figures) == len(report_fixtures.FLAGS)
    by_key = {re.search(r'alt="([^"]+)"', f).group(1): f for f in figures if "<img" in f}
    assert sorted(by_key) == ["img/0000.png", "img/0004.png", "img/0011.png"]
    assert "dark (0.125), grayscale (L)" in by_key["img/0000.png"]
    assert "low_information (1.585)" in by_key["img/0004.png"]
    uri = re.search(r'src="([^"]+)"', by_key["img/0011.png"]).group(1)
    assert np.array_equal(decoded(uri), pixels(11))
    # The key no shard holds is listed, escaped, without an image.
    assert "&lt;b&gt;missing&lt;/b&gt;.png" in flags and "<b>missing" not in image_page
    assert re.search(r"<td>dark</td><td class=\"n\">1</td><td class=\"n\">0</td>", flags)


def test_report_flags_beyond_the_cap_are_counted(image_dataset, tmp_path, monkeypatch):
    monkeypatch.setattr(report_gallery, "MAX_FLAGGED_SHOWN", 2)
    flags = section(read(report.write_report(image_dataset, str(tmp_path / "r.html"))),
                    "flags")
    assert len(re.findall(r"<figure>", flags)) == 2
    assert "2 more flagged images are not shown: every one is in statistics/flags.jsonl" \
        in flags


def test_report_says_what_a_dataset_lacks(tmp_path):
    out = str(tmp_path / "plain")
    report_fixtures.write_image_dataset(out, with_extras=False)
    page = read(report.write_report(out))
    for section_id in ("features", "drift", "duplicates", "flags"):
        assert "not in this dataset" in section(page, section_id)
    assert "Library versions: not in this dataset" in section(page, "settings")
    assert "No input was rejected" in section(page, "rejected")
    assert len(re.findall(r"<figure>", section(page, "samples"))) == 12






def test_report_draws_series_with_split_boundaries_in_input_units(series_page):
    samples = section(series_page, "samples")
    values = report_fixtures.series_values()
    # Drawn rows: 0-26 (train windows), 28-32, 34-38; rows 10 + 2 t.
    assert f"{values[0]:.4g} to {values[38]:.4g} (input units)" in samples
    lines = dict(re.findall(r'<polyline points="([^"]+)"[^>]*><title>(\w+)</title>',
                            samples)[i][::-1] for i in range(3))
    points = {split: np.array([[float(v) for v in p.split(",")] for p in line.split()])
              for split, line in lines.items()}
    assert {s: len(p) for s, p in points.items()} == {"train": 27, "validation": 5, "test": 5}
    every = np.concatenate(list(points.values()))
    slope, intercept = np.polyfit(every[:, 0], every[:, 1], 1)
    assert np.abs(every[:, 0] * slope + intercept - every[:, 1]).max() < 0.15  # a ramp
    boundaries = [float(x) for x in re.findall(r'<line x1="([^"]+)"[^>]*stroke-dasharray',
                                               samples)]
    assert boundaries == pytest.approx([6 + 748 * 28 / 38, 6 + 748 * 34 / 38], abs=0.06)
    assert "<td>malformed_row</td>" in section(series_page, "rejected")
    assert "&lt;4&gt;" in section(series_page, "rejected")


def test_report_is_the_same_bytes_every_time(image_dataset, image_page, tmp_path):
    again = report.write_report(image_dataset, str(tmp_path / "again.html"))
    assert read(again) == image_page


def test_report_compare_sets_two_datasets_side_by_side(image_dataset, tmp_path):
    shifted = str(tmp_path / "shifted")
    report_fixtures.write_image_dataset(shifted, shift=0.5)
    page = read(report.write_report(image_dataset, str(tmp_path / "c.html"),
                                    compare=shifted))
    assert sections(page) == ["compare", *IMAGE_SECTIONS]
    compare = section(page, "compare")
    assert re.search(r"<td>train</td><td class=\"n\">160</td><td class=\"n\">160</td>"
                     r"<td class=\"n\">\+0</td>", compare)
    rows = re.findall(r"<tr( class=\"over\")?><td>(\w+)</td><td>([\w/]+)</td><td>(\w+)</td>",
                      compare)
    # Only train's brightness moved; the other dataset is the baseline. Validation and
    # test hold 40 examples, too few to judge (reader.stats.drift.MIN_EXAMPLES).
    assert rows[0] == (' class="over"', "train", "labels/train", "brightness")
    assert all(not over for over, *_ in rows[1:])
    assert ("6 not judged: test vs labels/test (3 features), validation vs "
            "labels/validation (3 features)") in compare
    assert "not judged</td>" not in compare


def test_report_cli_writes_and_exits_0(image_dataset, tmp_path):
    out = tmp_path / "cli.html"
    done = subprocess.run([sys.executable, "-m", "reader.report", image_dataset, "--out",
                           str(out)], cwd=REPO_ROOT, capture_output=True, text=True,
                          check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"wrote {out}\n" and out.read_text().startswith("<!DOCTYPE html>")


def test_report_cli_exits_1_without_a_manifest(tmp_path, capsys):
    assert report.main([str(tmp_path)]) == 1
    assert "No manifest.json" in capsys.readouterr().err


def test_report_refuses_a_damaged_shard(tmp_path):
    out = str(tmp_path / "damaged")
    manifest = report_fixtures.write_image_dataset(out, with_extras=False)
    shard = f"{out}/{manifest['splits']['train']['shards'][0]['path']}"
    with open(shard, "r+b") as f:
        f.seek(40)  # Early in the first shard: the report reads only what it needs.
        byte = f.read(1)[0]
        f.seek(40)
        f.write(bytes([byte ^ 0xFF]))
    with pytest.raises(DatasetError, match=r"does not read as gzip TFRecords|CRC"):
        report.write_report(out)


def test_stream_records_checks_each_record_crc(tmp_path):
    import tensorflow as tf

    path = str(tmp_path / "plain.tfrecord")
    with tf.io.TFRecordWriter(path) as writer:
        for record in (b"first", b"second"):
            writer.write(record)
    assert list(report_samples.stream_records(path, contract.NO_COMPRESSION)) == [
        b"first", b"second"]
    with open(path, "r+b") as f:
        f.seek(-6, 2)  # inside the second record's data
        byte = f.read(1)[0]
        f.seek(-6, 2)
        f.write(bytes([byte ^ 0x01]))
    with pytest.raises(DatasetError, match=r"record at byte 21 .*fails its CRC check"):
        list(report_samples.stream_records(path, contract.NO_COMPRESSION))


def test_report_reads_and_writes_gs_uris(image_dataset, image_page, gcs_bucket):
    from tests.gcs_server import objects, upload_tree

    upload_tree(gcs_bucket.server, image_dataset, gcs_bucket.name, "images")
    written = report.write_report(f"{gcs_bucket.url}/images")
    assert written == f"{gcs_bucket.url}/images/{contract.REPORT_RELPATH}"
    blob = objects(gcs_bucket.server, gcs_bucket.name)[f"images/{contract.REPORT_RELPATH}"]
    page = blob.download_as_bytes().decode("utf-8")
    # The same page as the local copy's, but for the dataset's place in the header.
    assert page == image_page.replace(image_dataset, written.rsplit("/report/", 1)[0])


def test_report_samples_of_multi_label_and_regression_datasets(tmp_path):
    rows = {row["key"]: row for row in make_rows()}
    tags = str(tmp_path / "tags")
    write_dataset(tags, make_rows(), "multi_label")
    samples = section(read(report.write_report(tags)), "samples")
    for tag in TAGS:
        block = re.search(rf"<h3>{tag}</h3>(.*?)</div></div>", samples, re.S).group(1)
        keys = re.findall(r'alt="([^"]+)"', block)
        assert len(keys) == report_samples.SAMPLES_PER_CLASS
        assert all(tag in rows[key]["tags"] for key in keys)
    targets = str(tmp_path / "targets")
    write_dataset(targets, make_rows(), "regression", num_targets=2)
    samples = section(read(report.write_report(targets)), "samples")
    captions = re.findall(r'alt="([^"]+)"><figcaption>[^\n]*\ntrain\n([^<]*)</figcaption>',
                          samples)
    assert len(captions) == report_samples.UNLABELLED_SAMPLES
    for key, caption in captions:
        age, score = rows[key]["targets"]  # z-scored when stored, shown as given
        assert caption == f"age={age:.4g}, score={score:.4g}"


def test_report_shows_each_versions_statistics(tmp_path):
    out = str(tmp_path / "appended")
    report_fixtures.write_image_dataset(out)
    shutil.copytree(f"{out}/statistics", f"{out}/statistics/v00002")
    with open(f"{out}/statistics/v00002/drift.json", "w") as f:
        json.dump([{**report_fixtures.DRIFT[0], "baseline": "v00001/train"}], f)
    with open(f"{out}/manifest.json") as f:
        manifest = json.load(f)
    with open(f"{out}/manifest.json", "w") as f:
        json.dump({**manifest, "dataset_version": 2}, f)
    page = read(report.write_report(out))
    features = section(page, "features")
    assert re.findall(r"<tr><th>(v[\w/]+)</th>", features)[:6] == [
        "v00001/train", "v00001/validation", "v00001/test",
        "v00002/train", "v00002/validation", "v00002/test"]
    assert "v00001/train</td>" in section(page, "drift")
    assert "1 of 4 judged over their threshold" in section(page, "drift")
