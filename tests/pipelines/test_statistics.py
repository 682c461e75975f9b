"""The image job's statistics, quality flags and drift, on photos with planted problems.

The inputs are crops of the sample photos (``etl.testing.sample_photo``) in split
folders; planted among them are dark, light, blurred, blank, tiny, panoramic and
grayscale images. Expected values come from Pillow and NumPy on the source files,
never from the job's own code; the flags' recall and false positives are counted
against what was planted.
"""

from __future__ import annotations

import json
import math
import pathlib
import shutil

import numpy as np
import pytest
from PIL import Image, ImageFilter, ImageOps
from tensorflow_metadata.proto.v0 import statistics_pb2

from pipelines.testing import run_images_job, sample_photo
from reader.format import contract
from reader.stats import files as stats_files
from tests.browser import open_offline

CLASSES = ("cat", "dog")
TRAIN_PER_CLASS, TEST_PER_CLASS = 55, 55
# Planted, PLANTED_EACH of each kind (in train, train, validation, test), with the
# flag each must raise.
PLANTED = {"dark": "dark", "light": "light", "blurred": "blurry", "blank": "low_information",
           "tiny": "odd_size", "panorama": "odd_aspect_ratio", "grey": "grayscale"}
PLANTED_EACH = 4
SIZE = (120, 160)  # (height, width) of the clean photos


def _darker(pixels: np.ndarray, factor: float) -> np.ndarray:
    return np.round(pixels.astype(np.float64) * factor).astype(np.uint8)


def _planted(kind: str, index: int) -> Image.Image:
    photo = sample_photo(1000 + index, SIZE, seed=7)
    if kind == "dark":
        return Image.fromarray(_darker(photo, 0.15))
    if kind == "light":
        return Image.fromarray((255 - np.round((255 - photo) * 0.02)).astype(np.uint8))
    if kind == "blurred":
        return Image.fromarray(photo).filter(ImageFilter.GaussianBlur(6))
    if kind == "blank":
        rng = np.random.default_rng(index)
        flat = np.full(photo.shape, 90 + 20 * index, np.float64) + rng.normal(0, 2, photo.shape)
        return Image.fromarray(np.clip(np.round(flat), 0, 255).astype(np.uint8))
    if kind == "tiny":
        return Image.fromarray(sample_photo(1000 + index, (12, 16), seed=7))
    if kind == "panorama":
        return Image.fromarray(sample_photo(1000 + index, (60, 280), seed=7))
    return Image.fromarray(photo).convert("L")  # grey


def write_planted_input(root: pathlib.Path, test_factor: float = 0.55) -> dict[str, str]:
    """Split folders of clean photos with planted problems. Validation and test hold
    the same photos, test's scaled by ``test_factor`` (darker): one run shows a split
    that drifted and the same rows that did not. Returns planted key → kind."""
    planted = {}
    for split, per_class, offset in ((contract.TRAIN, TRAIN_PER_CLASS, 0),
                                     (contract.VALIDATION, TEST_PER_CLASS, 500),
                                     (contract.TEST, TEST_PER_CLASS, 500)):
        for c, label in enumerate(CLASSES):
            folder = root / split / label
            folder.mkdir(parents=True, exist_ok=True)
            for n in range(per_class):
                height = SIZE[0] + 12 * (n % 3 - 1)  # sizes vary, as photos' do
                pixels = sample_photo(offset + c * per_class + n,
                                      (height, height * SIZE[1] // SIZE[0]), seed=3)
                if split == contract.TEST:
                    pixels = _darker(pixels, test_factor)
                Image.fromarray(pixels).save(folder / f"{n:03d}.jpg", quality=90)
    # Two of each in train, one in validation and test: every split holds them alike.
    for kind in PLANTED:
        for n in range(PLANTED_EACH):
            split = (contract.TRAIN, contract.TRAIN, contract.VALIDATION, contract.TEST)[n]
            name = f"{split}/{CLASSES[n % 2]}/planted-{kind}-{n}.jpg"
            _planted(kind, min(n, 2)).save(root / name, quality=90)
            planted[name] = kind
    return planted


def reference_facts(path: pathlib.Path) -> dict[str, float]:
    """Size, brightness and contrast of a source file by Pillow and NumPy: upright,
    RGB, the shorter side resized to 224, its centre 224 x 224 (the stored image)
    area-averaged to 32 x 32 (the size the job measures at)."""
    with Image.open(path) as image:
        mode = image.mode
        upright = ImageOps.exif_transpose(image).convert("RGB")
    width, height = upright.size
    scale = 224 / min(width, height)
    resized = upright.resize((round(width * scale), round(height * scale)),
                             Image.Resampling.BILINEAR, reducing_gap=2.0)
    left, top = ((side - 224) // 2 for side in resized.size)
    stored = resized.crop((left, top, left + 224, top + 224))
    small = np.asarray(stored.resize((32, 32), Image.Resampling.BOX), np.float64)
    hsp = np.sqrt(small ** 2 @ np.array([0.241, 0.691, 0.068])) / 255
    luma = small @ np.array([0.299, 0.587, 0.114]) / 255
    return {"width": width, "height": height, "mode": mode, "brightness": hsp.mean(),
            "brightness_p99": np.percentile(hsp, 99), "contrast": luma.std()}


@pytest.fixture(scope="module")
def planted_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("planted")
    planted = write_planted_input(root / "input")
    result = run_images_job(root / "input", root / "out")
    return root, planted, result


def _flag_lines(out: pathlib.Path) -> dict[str, dict]:
    lines = (out / "statistics" / contract.FLAGS_FILENAME).read_text().splitlines()
    return {(entry := json.loads(line))["key"]: entry for line in lines}


def test_every_planted_dark_blank_and_tiny_image_is_flagged_and_no_clean_photo_dark(
        planted_run):
    root, planted, result = planted_run
    flagged = _flag_lines(root / "out")
    found = {kind: sum(PLANTED[kind] in flagged.get(key, {}).get("flags", ())
                       for key, k in planted.items() if k == kind) for kind in PLANTED}
    # The test split's photos are darkened on purpose (the drift test): the clean
    # photos are train's and validation's.
    clean_flags = [(key, entry["flags"]) for key, entry in flagged.items()
                   if key not in planted and entry["split"] != contract.TEST]
    print("recall per planted kind:", found, "flags on clean train photos:", clean_flags)
    for kind in ("dark", "blank", "tiny"):
        assert found[kind] == PLANTED_EACH, (kind, found)
    assert not [key for key, flags in clean_flags
                if {"dark", "low_information"} & set(flags)]
    # Recall of the other planted kinds, and few false positives in all.
    assert sum(found.values()) >= len(PLANTED) * PLANTED_EACH - 2, found
    assert len(clean_flags) <= 2, clean_flags
    # Each line as the hold-out reads it, and the counts in the manifest.
    entry = flagged[next(key for key, kind in planted.items() if kind == "dark")]
    assert set(entry) == {"key", "split", "label", "flags", "values"}
    assert entry["label"] in CLASSES and entry["values"]["dark"] < 0.25
    counts = result.manifest["statistics"]["flags"]["counts"]
    assert counts == {name: sum(name in e["flags"] for e in flagged.values())
                      for name in contract.QUALITY_FLAGS}


def test_flags_never_drop_an_image(planted_run):
    _, planted, result = planted_run
    written = {record["key"] for split in contract.SPLITS
               for record in result.records(split)}
    assert set(planted) <= written
    assert result.rejected == ()


def test_facts_match_pillow_and_numpy_on_the_source_files(planted_run):
    root, planted, result = planted_run
    train = stats_files.read_split_statistics(str(root / "out"))[contract.TRAIN]
    keys = sorted(record["key"] for record in result.records(contract.TRAIN))
    references = {key: reference_facts(root / "input" / key) for key in keys}
    feature = {stats_files.feature_name(f): f for f in train.features}
    assert train.num_examples == len(references)
    for name in ("width", "height"):
        values = [ref[name] for ref in references.values()]
        stats = feature[name].num_stats
        assert (stats.mean, stats.min, stats.max) == (
            pytest.approx(np.mean(values), rel=1e-12), min(values), max(values))
    # The job's 32 px thumbnail is resized by TensorFlow, the reference's by Pillow:
    # they agree to about a hundredth.
    for name in ("brightness", "contrast"):
        values = np.array([ref[name] for ref in references.values()])
        assert feature[name].num_stats.mean == pytest.approx(values.mean(), abs=0.01), name
    modes = {ref["mode"] for ref in references.values()}
    assert {b.label for b in feature["mode"].string_stats.rank_histogram.buckets} == modes
    # Each planted image's flag value is its own fact: against the reference.
    flagged = _flag_lines(root / "out")
    for key, kind in planted.items():
        if not key.startswith(contract.TRAIN):
            continue
        ref, values = references[key], flagged[key]["values"]
        if kind == "dark":
            assert values["dark"] == pytest.approx(ref["brightness_p99"], abs=0.02)
        elif kind == "panorama":
            assert values["odd_aspect_ratio"] == pytest.approx(ref["height"] / ref["width"],
                                                               abs=1e-6)
        elif kind == "tiny":
            assert values["odd_size"] == pytest.approx(math.sqrt(ref["width"] * ref["height"]))
        elif kind == "grey":
            assert values["grayscale"] == ref["mode"] == "L"


def test_label_counts_per_split_equal_the_manifests(planted_run):
    root, _, result = planted_run
    datasets = stats_files.read_split_statistics(str(root / "out"))
    for split, dataset in datasets.items():
        label = stats_files.feature_stats(dataset, "label")
        counts = {b.label: int(b.sample_count) for b in label.string_stats.rank_histogram.buckets}
        assert counts == result.manifest["label_counts"][split], split


def test_statistics_files_parse_as_tfdv_protos(planted_run):
    root, _, _ = planted_run
    import tensorflow as tf

    path = root / "out" / contract.statistics_relpath(contract.TRAIN)
    [record] = list(tf.compat.v1.io.tf_record_iterator(str(path)))  # tfdv.load_statistics
    parsed = statistics_pb2.DatasetFeatureStatisticsList.FromString(record)
    assert [d.name for d in parsed.datasets] == [contract.TRAIN]
    schema = stats_files.read_schema(str(root / "out" / "statistics" / "schema.pbtxt"))
    assert {f.name for f in schema.feature} >= {"label", "brightness", "width"}


def _drift(out: pathlib.Path) -> list[dict]:
    return json.loads((out / "statistics" / contract.DRIFT_FILENAME).read_text())


def test_a_darker_test_split_drifts_on_brightness_and_nothing_unrelated(planted_run):
    root, _, result = planted_run
    entries = _drift(root / "out")
    darker = {e["feature"] for e in entries if e["split"] == contract.TEST and e["over"]}
    assert "brightness" in darker
    assert not darker & {"width", "height", "megapixels", "aspect_ratio", "label", "format"}
    assert "WARNING: drift over threshold" in result.stdout
    # Validation holds the same photos, not darkened: nothing is over.
    same = [e for e in entries if e["split"] == contract.VALIDATION]
    assert same and all(e["judged"] for e in same)
    assert [e for e in same if e["over"]] == []


def test_an_appended_version_with_darker_photos_a_new_format_and_class_is_reported(
        planted_run, tmp_path):
    root, _, _ = planted_run
    source = tmp_path / "input"
    shutil.copytree(root / "input", source)
    shutil.copytree(root / "out", tmp_path / "out")
    added = source / contract.TRAIN
    (added / "zebra").mkdir()
    for n in range(125):
        folder = added / ("zebra" if n < 5 else CLASSES[n % 2])
        height = SIZE[0] + 12 * (n % 3 - 1)
        image = Image.fromarray(_darker(sample_photo(
            3000 + n, (height, height * SIZE[1] // SIZE[0]), seed=5), 0.5))
        if n < 15:
            image.save(folder / f"new-{n:03d}.png")
        else:
            image.save(folder / f"new-{n:03d}.jpg", quality=90)
    appended = run_images_job(source, tmp_path / "out", "--append")
    entry = appended.manifest["statistics"]
    assert entry["version"] == 2
    # Against the first version's schema: a format it never held.
    [anomaly] = entry["anomalies"]
    assert (anomaly["split"], anomaly["feature"], anomaly["kind"]) == (
        contract.TRAIN, "format", "new_values")
    assert "png" in anomaly["values"]
    # Against the first version's statistics: the darker photos.
    assert "train vs v00001/train: brightness" in entry["drift_over"]
    assert "train vs v00001/train: width" not in entry["drift_over"]
    # A new class cannot join an appended version: its images are dead letters.
    assert appended.rejected_reasons == {f"train/zebra/new-{n:03d}.png": "label_not_in_dataset"
                                         for n in range(5)}
    printed = appended.stdout
    assert "WARNING: train: ENUM_TYPE_UNEXPECTED_STRING_VALUES" in printed
    assert "label_not_in_dataset=5" in printed and "v00001/train: brightness" in printed
    assert (tmp_path / "out" / contract.statistics_relpath(contract.TRAIN, 2)).exists()


def test_the_size_rule_is_the_documented_one(planted_run):
    root, planted, result = planted_run
    bounds = result.manifest["statistics"]["flags"]["odd_size_bounds"]
    tiny = next(key for key, kind in planted.items() if kind == "tiny")
    assert math.sqrt(12 * 16) < bounds[0] < math.sqrt(SIZE[0] * SIZE[1]) < bounds[1]
    assert not [key for key, entry in _flag_lines(root / "out").items()
                if "odd_size" in entry["flags"] and planted.get(key) != "tiny"]
    assert _flag_lines(root / "out")[tiny]["values"]["odd_size"] == pytest.approx(
        math.sqrt(12 * 16), abs=1e-3)


def test_the_report_the_job_wrote_opens_offline_in_chromium(planted_run, browser, tmp_path):
    root, planted, _ = planted_run
    page = root / "out" / contract.REPORT_RELPATH
    assert open_offline(browser, str(page), tmp_path / "report.png") == []
    html = page.read_text()
    # Every flagged image is shown, each as an inline thumbnail.
    for key in planted:
        assert key in html
    assert "http://" not in html and "https://" not in html
