"""python -m reader.preview: contact sheets of images and of time-series windows."""

from __future__ import annotations

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
