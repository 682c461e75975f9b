"""python -m reader.preview: contact sheets of images and of time-series windows."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from reader import preview
from tests.reader.helpers import (
    BASE_COLOURS,
    FORECAST_HORIZON,
    FORECAST_WINDOW,
    REPO_ROOT,
    series_label,
)
from tests.reader.label_fixtures import UNSEEN_TAG, make_rows

# Fixture images are 16 px: shown enlarged 6 times, to 96 px tiles.
TILE = 96


def test_image_preview_captions_each_image_with_its_label_name(image_dataset):
    shown = preview.image_preview(image_dataset, "train", n=20, seed=1)
    assert len(shown.images) == len(shown.captions) == 20
    for image, caption in zip(shown.images, shown.captions, strict=True):
        # Solid images whose colour is their class's, within the fixture's jitter.
        assert np.abs(image[0, 0].astype(int) - BASE_COLOURS[caption]).max() <= 26


def test_contact_sheet_puts_each_image_on_its_tile(image_dataset):
    shown = preview.image_preview(image_dataset, "train", n=5, seed=1)
    sheet, layout = preview.contact_sheet(shown)
    # 5 images: ceil(sqrt(5)) = 3 columns, 2 rows; 4 px margins and gaps, 16 px captions.
    assert sheet.shape == (4 + 2 * (TILE + 16 + 4), 4 + 3 * (TILE + 4), 3)
    for index, image in enumerate(shown.images):
        top, left = 4 + (index // 3) * (TILE + 16 + 4), 4 + (index % 3) * (TILE + 4)
        assert layout.tile_origin(index) == (top, left)
        tile = sheet[top:top + TILE, left:left + TILE]
        assert np.array_equal(tile, np.broadcast_to(image[0, 0], tile.shape))
    assert np.all(sheet[:4] == 255) and np.all(sheet[:, :4] == 255)  # margins


def test_image_preview_augment_pairs_each_image_with_its_augmentation(image_dataset):
    shown = preview.image_preview(image_dataset, "train", n=12, augment=True, seed=1)
    assert shown.augmented.shape == shown.images.shape
    checked = 0
    for image, augmented in zip(shown.images.astype(float),
                                shown.augmented.astype(float), strict=True):
        # A solid image stays solid: flips and crops move nothing, brightness and
        # contrast act on the whole image alike.
        colour = augmented[0, 0]
        assert np.all(augmented == colour)
        if np.any((colour == 0) | (colour == 255)):
            continue  # Clipped: the ratio below does not hold.
        # Brightness adds d to every channel and contrast scales each channel's
        # distance to the image mean by f in [0.8, 1.2], so channel differences scale
        # by f (to within uint8 rounding).
        high, low = np.argmax(image[0, 0]), np.argmin(image[0, 0])  # >= 120 apart
        factor = (colour[high] - colour[low]) / (image[0, 0, high] - image[0, 0, low])
        assert 0.8 - 0.02 <= factor <= 1.2 + 0.02
        checked += 1
    assert checked >= 6
    assert not np.array_equal(shown.images, shown.augmented)


def run_preview(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "reader.preview", *args], cwd=REPO_ROOT,
                          capture_output=True, text=True)


def test_preview_cli_writes_the_sheet_pixel_for_pixel(image_dataset, tmp_path,
                                                      fresh_global_seed):
    out = str(tmp_path / "sheet.png")
    result = run_preview(image_dataset, "--out", out, "--n", "6", "--seed", "2")
    assert result.returncode == 0, result.stderr[-2000:]
    picture = tf.io.decode_png(tf.io.read_file(out), channels=3).numpy()
    # 3 x 2 tiles as above, under a 32 px title strip.
    assert picture.shape == (32 + 4 + 2 * (TILE + 16 + 4), 4 + 3 * (TILE + 4), 3)
    first = preview.image_preview(image_dataset, "train", n=6, seed=2).images[0]
    tile = picture[32 + 4:32 + 4 + TILE, 4:4 + TILE]
    assert np.array_equal(tile, np.broadcast_to(first[0, 0], tile.shape))


def test_window_preview_shows_windows_and_targets_in_input_units(forecast_dataset):
    shown = preview.window_preview(forecast_dataset, "train", n=8, seed=0)
    assert shown.units == "input" and shown.value_columns == ["value"]
    for window, target, caption in zip(shown.windows, shown.targets, shown.captions,
                                       strict=True):
        # Series "ramp" holds value t at timestamp t.
        series_id, start = caption.split(" @ ")
        t0 = int(start)
        assert series_id == "ramp"
        np.testing.assert_allclose(window[:, 0], np.arange(t0, t0 + FORECAST_WINDOW),
                                   atol=1e-3)
        np.testing.assert_allclose(target[:, 0], np.arange(
            t0 + FORECAST_WINDOW, t0 + FORECAST_WINDOW + FORECAST_HORIZON), atol=1e-3)


def test_window_preview_of_labelled_series_captions_the_label(labelled_series_dataset):
    shown = preview.window_preview(labelled_series_dataset, "train", n=6, seed=0)
    assert shown.targets is None
    for caption in shown.captions:
        series_id, label = caption.split(" @ ")[0], caption.split(": ")[1]
        assert label == series_label(series_id)


def test_preview_main_draws_time_series(forecast_dataset, tmp_path):
    out = str(tmp_path / "windows.png")
    assert preview.main([forecast_dataset, "--out", out, "--n", "4"]) == 0
    assert tf.io.decode_png(tf.io.read_file(out)).shape[0] > 100


def test_preview_main_refuses_augment_for_time_series(forecast_dataset, tmp_path, capsys):
    with pytest.raises(SystemExit) as info:
        preview.main([forecast_dataset, "--out", str(tmp_path / "x.png"), "--augment"])
    assert info.value.code == 2
    assert "images only" in capsys.readouterr().err


def test_preview_without_matplotlib_says_how_to_install_it(image_dataset, tmp_path,
                                                           monkeypatch):
    # A None entry in sys.modules makes ``import matplotlib`` fail as if absent.
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(ImportError, match="pip install matplotlib"):
        preview.main([image_dataset, "--out", str(tmp_path / "x.png")])
    assert not os.path.exists(tmp_path / "x.png")


def test_import_reader_does_not_import_matplotlib():
    code = "import sys, reader; assert 'matplotlib' not in sys.modules"
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT,
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-2000:]


@pytest.mark.parametrize("image_size", [16, 96, 224])
def test_tile_size_enlarges_small_images_and_shrinks_large_ones(image_size):
    assert preview.tile_size(image_size) == {16: 96, 96: 96, 224: 160}[image_size]


def rows_shown(shown: preview.ImagePreview) -> list[dict]:
    """The label_fixtures row of each shown image: its pixels hold the row's index."""
    rows = {row["index"]: row for row in make_rows()}
    return [rows[int(image[0, 0, 0]) + 256 * int(image[0, 0, 1])] for image in shown.images]


def tags_line(tags: list[str], vocab: list[str]) -> str:
    """Names in stored order (ids ascending, -1 first), unseen ones marked."""
    ordered = sorted((vocab.index(t) if t in vocab else -1, t) for t in tags)
    return ", ".join(t if i >= 0 else f"{t} (not in train)" for i, t in ordered) or (
        "(no label)")


def test_image_preview_captions_every_label_and_raw_target(multi_label_targets_dataset):
    shown = preview.image_preview(multi_label_targets_dataset, "validation", n=40, seed=0)
    with open(os.path.join(multi_label_targets_dataset, "manifest.json")) as f:
        vocab = json.load(f)["label_vocab"]
    assert shown.target_columns == ["age", "score"] and len(shown.captions) == 40
    unseen = 0
    for caption, targets, row in zip(shown.captions, shown.targets, rows_shown(shown),
                                     strict=True):
        # De-normalised with the manifest's mean and std: the input's values.
        np.testing.assert_allclose(targets, row["targets"], rtol=1e-6)
        age, score = row["targets"]
        assert caption == f"{tags_line(row['tags'], vocab)}\nage={age:.4g}, score={score:.4g}"
        unseen += UNSEEN_TAG in row["tags"]
    assert unseen > 0 and "(no label)" in "".join(shown.captions)


def test_image_preview_of_regression_captions_the_targets(regression_dataset):
    shown = preview.image_preview(regression_dataset, "test", n=6, seed=0)
    for caption, row in zip(shown.captions, rows_shown(shown), strict=True):
        assert caption == "age={:.4g}, score={:.4g}".format(*row["targets"])


def test_image_preview_of_class_and_target_captions_both(class_targets_dataset):
    shown = preview.image_preview(class_targets_dataset, "test", n=6, seed=0)
    for caption, row in zip(shown.captions, rows_shown(shown), strict=True):
        assert caption == f"{row['colour']}\nage={row['targets'][0]:.4g}"


def test_wrap_caption_wraps_each_line_at_word_boundaries():
    assert preview.wrap_caption("cat, dog, outdoor, night\nage=31.5, score=2.25", 16) == [
        "cat, dog,", "outdoor, night", "age=31.5,", "score=2.25"]
    assert preview.wrap_caption("red", 16) == ["red"]


def test_contact_sheet_makes_room_for_the_longest_caption():
    images = np.zeros((3, 8, 8, 3), np.uint8)  # 8 px: 96 px tiles, 16 characters a line
    shown = preview.ImagePreview(images, None, ["a", "b\nc", "x"])
    sheet, layout = preview.contact_sheet(shown)
    assert layout.caption_lines == 2
    # 2 x 2 cells, each a tile above two 16 px caption lines.
    assert sheet.shape == (4 + 2 * (TILE + 2 * 16 + 4), 4 + 2 * (TILE + 4), 3)
    assert layout.tile_origin(2) == (4 + TILE + 2 * 16 + 4, 4)


def test_preview_main_draws_multi_label_sheets(multi_label_targets_dataset, tmp_path):
    out = str(tmp_path / "tags.png")
    assert preview.main([multi_label_targets_dataset, "--out", out, "--n", "4"]) == 0
    shown = preview.image_preview(multi_label_targets_dataset, "train", n=4, seed=0)
    _, layout = preview.contact_sheet(shown)
    assert tf.io.decode_png(tf.io.read_file(out)).shape[:2] == (32 + layout.height,
                                                                layout.width)
