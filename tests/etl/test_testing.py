"""Tests of etl/testing.py's fixtures and readers and pipelines/testing.py's job runs,
the module users' tests import.

The writers are checked against independent readings (Pillow opens each image with
the format and size asked; the csv and json modules read the tables back; the job's
own row parser reads the manifests); one image job run on a tree with every bad kind
and one series job run show the stated reasons and what the results hold. The first
``python`` block of the docs that uses ``pipelines.testing`` runs as written, in an empty
folder.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import os
import pathlib
import re
import subprocess
import sys

import numpy as np
import pytest
from PIL import Image

from etl.core.dead_letters import Rejection
from etl.images import labels, sources
from pipelines import testing
from reader.format import contract
from reader.tfdata.feature_specs import feature_spec_from_json

REPO = pathlib.Path(__file__).resolve().parents[2]
PILLOW_FORMATS = {"jpeg": "JPEG", "png": "PNG", "gif": "GIF", "bmp": "BMP", "webp": "WEBP"}
ALL_FORMATS = tuple(testing.IMAGE_EXTENSIONS)


def _opened(path: pathlib.Path, image_format: str) -> tuple[int, int]:
    """``(height, width)`` of the image at ``path``, opened by Pillow as ``image_format``
    only, decoded whole."""
    with Image.open(path, formats=[PILLOW_FORMATS[image_format]]) as image:
        image.load()
        return image.height, image.width


def test_sample_photo_depends_on_index_and_seed_only(tmp_path):
    photos = [testing.sample_photo(i, (20, 30)) for i in range(12)]
    assert all(p.shape == (20, 30, 3) and p.dtype == np.uint8 for p in photos)
    assert len({p.tobytes() for p in photos}) == 12
    np.testing.assert_array_equal(testing.sample_photo(3, (20, 30)), photos[3])
    assert testing.sample_photo(3, (20, 30), seed=1).tobytes() != photos[3].tobytes()
    assert testing.sample_photo(0, 24).shape == (24, 24, 3)


def test_sample_photo_is_a_photo_not_noise():
    # Neighbouring pixels of a photo are alike; uniform noise's differ by ~85 levels.
    photo = testing.sample_photo(5, (48, 64)).astype(np.int16)
    assert np.abs(np.diff(photo, axis=1)).mean() < 30
    assert photo.std() > 10


def test_write_images_folder_writes_each_format_at_its_size(tmp_path):
    photos = testing.write_images(tmp_path / "in", ("bird", "cat", "dog"), 5,
                                  formats=ALL_FORMATS, size=(30, 44))
    on_disk = sorted(str(p.relative_to(tmp_path / "in")) for p in (tmp_path / "in").rglob("*")
                     if p.is_file())
    assert sorted(photos.keys) == on_disk and len(on_disk) == 15
    assert photos.input == str(tmp_path / "in") and photos.splits == {} and photos.bad == {}
    for i, key in enumerate(photos.keys):
        label, name = key.split("/")
        image_format = ALL_FORMATS[i % 5]
        assert photos.labels[key] == label == ("bird", "cat", "dog")[i // 5]
        assert name.endswith("." + testing.IMAGE_EXTENSIONS[image_format])
        assert _opened(tmp_path / "in" / key, image_format) == (30, 44)
    assert len({(tmp_path / "in" / key).read_bytes() for key in photos.keys}) == 15


def test_write_images_split_folders_hold_each_label_in_each_split(tmp_path):
    photos = testing.write_images(tmp_path, ("cat", "dog"), 3,
                                  splits=("train", "validation", "test"), bad=["corrupt"])
    assert {(key.split("/")[0], key.split("/")[1]) for key in photos.keys} == {
        (split, label) for split in ("train", "validation", "test") for label in ("cat", "dog")}
    assert photos.splits == {key: key.split("/")[0] for key in photos.keys}
    assert photos.bad == {"train/cat/bad-corrupt.jpg": "corrupt_image_data"}


@pytest.mark.parametrize("suffix", [".csv", ".jsonl"])
def test_write_images_manifest_rows_parse_as_the_job_parses_them(tmp_path, suffix):
    path = tmp_path / f"list{suffix}"
    photos = testing.write_images(
        path, ("cat", "dog"), 2, formats=("png", "webp"), size=16, splits=("train", "test"),
        bad=["empty", "stray"],
        columns={"age": lambda i, label: 20 + i / 4, "tags": lambda i, label: [label, "x"]})
    text = path.read_text()
    rows = (list(csv.DictReader(io.StringIO(text))) if suffix == ".csv"
            else [json.loads(line) for line in text.splitlines()])
    assert [row["path"] for row in rows] == [*photos.keys, *photos.bad]
    assert [str(row["age"]) for row in rows] == ["20.0", "20.25", "20.5", "20.75",
                                                 "19.75", "19.75"]
    assert rows[0]["tags"] == ("cat|x" if suffix == ".csv" else ["cat", "x"])
    columns = labels.LabelColumns(target_columns=("age",))
    parsed = [sources.record_from_row(row, str(tmp_path), f"{path}:{n}", columns=columns,
                                      from_csv=suffix == ".csv") for n, row in enumerate(rows)]
    assert [(r.key, r.label, r.split, r.targets) for r in parsed[:4]] == [
        (key, photos.labels[key], photos.splits[key], (20 + i / 4,))
        for i, key in enumerate(photos.keys)]
    assert isinstance(parsed[5], Rejection) and parsed[5].reason == "missing_label"
    assert parsed[5].key == "images/stray.png" and photos.bad[parsed[5].key] == "missing_label"
    for i, key in enumerate(photos.keys):
        assert _opened(tmp_path / key, ("png", "webp")[i % 2]) == (16, 16)


def test_write_images_refuses_unknown_formats_and_bad_kinds(tmp_path):
    with pytest.raises(ValueError, match="tiff"):
        testing.write_images(tmp_path, formats=("tiff",))
    with pytest.raises(ValueError, match="broken"):
        testing.write_images(tmp_path, bad=["broken"])
    with pytest.raises(ValueError, match="manifest"):
        testing.write_images(tmp_path, columns={"age": lambda i, label: i})
    assert not any(tmp_path.iterdir())


def test_photos_without_scikit_learn_name_the_extra(monkeypatch):
    from etl import testing as fixtures  # where the photos are cached

    fixtures._photos.cache_clear()
    monkeypatch.setitem(sys.modules, "sklearn.datasets", None)
    try:
        with pytest.raises(ImportError, match=re.escape("pip install 'tfrecord-etl[testing]'")):
            testing.sample_photo(0)
    finally:
        fixtures._photos.cache_clear()


@pytest.mark.parametrize("suffix", [".csv", ".jsonl"])
def test_write_series_rows_read_back(tmp_path, suffix):
    series = testing.write_series(tmp_path / "deep" / f"rows{suffix}", (5, 3),
                                  value_columns=("value", "other"), start=10, step=2)
    text = (tmp_path / "deep" / f"rows{suffix}").read_text()
    rows = (list(csv.DictReader(io.StringIO(text))) if suffix == ".csv"
            else [json.loads(line) for line in text.splitlines()])
    expected = [(sid, 10 + 2 * t, round((t * 7919 % 101) / 10, 1),
                 round(((t + 17) * 7919 % 101) / 10, 1))
                for sid, length in (("a", 5), ("b", 3)) for t in range(length)]
    assert [(r["series_id"], int(r["timestamp"]), float(r["value"]), float(r["other"]))
            for r in rows] == expected
    assert (series.lengths, series.rows, series.value_columns) == (
        {"a": 5, "b": 3}, 8, ("value", "other"))


def test_write_series_default_is_the_suites_small_series_csv(tmp_path):
    # The bytes tests/series_fixtures.py wrote with the csv module before it used this.
    buf = io.StringIO(newline="")
    writer = csv.writer(buf)
    writer.writerow(["series_id", "timestamp", "value"])
    for series, length in (("a", 60), ("b", 45), ("c", 33)):
        writer.writerows((series, t, round((t * 7919 % 101) / 10.0, 1)) for t in range(length))
    testing.write_series(tmp_path / "rows.csv")
    assert (tmp_path / "rows.csv").read_bytes() == buf.getvalue().encode()


# --- one image job run, one series job run -------------------------------------------------

@pytest.fixture(scope="module")
def image_run(tmp_path_factory):
    """Every format and every bad kind in a tree, the job run quietly at 16 px."""
    root = tmp_path_factory.mktemp("testing_images")
    photos = testing.write_images(root / "in", ("cat", "dog", "owl"), 4, formats=ALL_FORMATS,
                                  size=(40, 56), bad=list(testing.BAD_FILES))
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        result = testing.run_images_job(photos.input, root / "out", "--image_size=16",
                                        "--max_error_fraction=0.5",
                                        "--cross_split_duplicates=off")
    return photos, result, printed.getvalue()


def test_run_images_job_bad_files_get_their_stated_reasons(image_run):
    photos, result, _ = image_run
    assert result.rejected_reasons == photos.bad == {
        f"cat/{name}" if kind != "stray" else name: reason
        for kind, (name, reason) in testing.BAD_FILES.items()}
    assert all(letter["message"] for letter in result.rejected)


def test_run_images_job_counts_reconcile(image_run):
    photos, result, _ = image_run
    assert result.inputs == photos.inputs == result.written + len(result.rejected) == 17
    assert result.written == len(photos.keys) == sum(result.counts.values())
    assert result.counts == {split: result.manifest["splits"][split]["num_records"]
                             for split in contract.SPLITS}
    assert result.output_dir.endswith("out") and result.manifest["kind"] == "images"


def test_run_images_job_records_are_plain_values(image_run):
    photos, result, _ = image_run
    stored = {}
    for split, count in result.counts.items():
        records = result.records(split)
        assert len(records) == count
        stored.update({record["key"]: record for record in records})
    assert stored.keys() == set(photos.keys)
    for key, record in stored.items():
        assert {name: type(value) for name, value in record.items()} == {
            "key": str, "label": int, "label_name": str, "image": bytes, "height": int,
            "width": int, "channels": int}
        assert record["label_name"] == photos.labels[key]
        assert (record["height"], record["width"], record["channels"]) == (16, 16, 3)
        pixels = result.decode_image(record["image"])
        with Image.open(io.BytesIO(record["image"]), formats=["JPEG"]) as image:
            np.testing.assert_array_equal(pixels, np.asarray(image.convert("RGB")))
        assert pixels.shape == (16, 16, 3)


def test_run_images_job_label_vocabulary_maps_the_stored_ids(image_run):
    _, result, _ = image_run
    assert sorted(result.label_vocabulary) == ["cat", "dog", "owl"]
    assert list(result.label_vocabulary) == result.manifest["label_vocab"]
    for split in result.counts:
        for record in result.records(split):
            assert record["label"] == -1 or (
                result.label_vocabulary[record["label"]] == record["label_name"])


def test_run_images_job_as_numpy_gives_what_tf_parses(image_run):
    import tensorflow as tf

    _, result, _ = image_run
    ours = result.records("train", as_numpy=True)
    spec = feature_spec_from_json(result.manifest["features"])
    shard = os.path.join(result.output_dir, result.manifest["splits"]["train"]["shards"][0]["path"])
    theirs = [tf.io.parse_single_example(record, spec)
              for record in tf.data.TFRecordDataset([shard], "GZIP")]
    assert len(ours) == len(theirs) == result.counts["train"]
    for mine, parsed in zip(ours, theirs, strict=True):
        assert mine.keys() == parsed.keys()
        for name, value in parsed.items():
            assert type(mine[name]) is type(value.numpy()) and mine[name] == value.numpy()


def test_run_images_job_quiet_keeps_the_summary_in_the_result(image_run):
    _, result, printed = image_run
    assert printed == ""
    assert "Wrote dataset 'images'" in result.stdout and "rejected: 5" in result.stdout


def test_job_result_from_output_dir_reads_the_same_result(image_run):
    _, result, _ = image_run
    again = testing.JobResult.from_output_dir(pathlib.Path(result.output_dir))
    assert again == testing.JobResult(**{**vars(result), "stdout": "", "stderr": ""})


@pytest.fixture(scope="module")
def series_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("testing_series")
    series = testing.write_series(root / "rows.csv", (30, 24, 20))
    result = testing.run_timeseries_job(series.input, str(root / "out"), "--window_size=6",
                                        "--horizon=2")
    return series, result


def test_run_timeseries_job_counts_and_windows(series_run):
    series, result = series_run
    counts = result.manifest["timeseries"]["counts"]
    assert result.inputs == series.rows == counts["rows_read"]
    assert result.counts == {split: counts[f"windows_{split}"] for split in contract.SPLITS}
    assert result.written == sum(result.counts.values()) > 0
    assert result.rejected == () and result.label_vocabulary is None


def test_run_timeseries_job_records_hold_the_written_values(series_run):
    series, result = series_run
    mean, std = result.manifest["normalisation"]["mean"][0], result.manifest[
        "normalisation"]["std"][0]
    records = [r for split in contract.SPLITS for r in result.records(split)]
    assert len(records) == result.written
    for record in records:
        assert isinstance(record["series_id"], str) and record["series_id"] in series.lengths
        start = int(record["window_start"])
        window, target = record["window"], record["target"]
        assert len(window) == 6 and len(target) == 2 and all(
            isinstance(row, list) and isinstance(row[0], float) for row in window + target)
        raw = [row[0] * std + mean for row in window + target]
        expected = [round((t * 7919 % 101) / 10, 1) for t in range(start, start + 8)]
        np.testing.assert_allclose(raw, expected, atol=1e-4)


# --- the docs' example ------------------------------------------------------------------------

def _docs_example() -> tuple[str, str]:
    """The first ``python`` block of README.md, then docs/*.md (sorted), that uses
    ``pipelines.testing`` and defines a test: ``(file, code)``."""
    for path in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]:
        for block in re.findall(r"^```python\n(.*?)^```", path.read_text(), re.S | re.M):
            uses = "pipelines.testing" in block or "from pipelines import testing" in block
            if uses and "def test_" in block:
                return str(path.relative_to(REPO)), block
    raise AssertionError("No python block in README.md or docs/ uses pipelines.testing in a "
                         "test.")


def test_docs_example_passes_in_an_empty_folder(tmp_path):
    where, code = _docs_example()
    assert where == "docs/TESTING_YOUR_DATA.md"
    (tmp_path / "test_example.py").write_text(code)
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "test_example.py"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=300, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "1 passed" in done.stdout


def test_pipelines_testing_hands_on_every_public_name_of_etl_testing():
    from etl import testing as fixtures

    public = {name for name in vars(fixtures) if not name.startswith("_")
              and getattr(vars(fixtures)[name], "__module__", "etl.testing") == "etl.testing"
              and not isinstance(vars(fixtures)[name], type(fixtures))}
    assert public <= set(testing.__all__), sorted(public - set(testing.__all__))
    assert all(getattr(testing, name) is getattr(fixtures, name) for name in public)
