"""Image-quality measures and flags, against Pillow and NumPy computed here: Pillow's
``ImageStat``, ``Image.entropy`` and ``ImageFilter.FIND_EDGES`` and NumPy's
percentiles on the same thumbnails, never the code under test; flags on planted
dark, light, blurred, blank, tiny, panoramic and grey images among real photo content
(crops of scikit-learn's sample photos)."""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image, ImageFilter, ImageOps, ImageStat

from etl.images import quality
from etl.testing import encode_image, sample_photo

SIDE = quality.QUALITY_THUMBNAIL_SIZE


def _reference(thumbnail: np.ndarray) -> dict[str, float]:
    """Each measure of one ``uint8 [32, 32, 3]`` thumbnail, from its definition."""
    pixels = thumbnail.astype(np.float64)
    brightness = np.sqrt(0.241 * pixels[..., 0] ** 2 + 0.691 * pixels[..., 1] ** 2
                         + 0.068 * pixels[..., 2] ** 2) / 255
    image = Image.fromarray(thumbnail)
    grey = image.convert("L")
    edges = np.asarray(grey.filter(ImageFilter.FIND_EDGES), np.float64)[1:-1, 1:-1]
    return {"brightness": brightness.mean(),
            "brightness_p5": np.percentile(brightness, 5),
            "brightness_p99": np.percentile(brightness, 99),
            "contrast": ImageStat.Stat(grey).stddev[0] / 255,
            "sharpness": edges.std(),
            "entropy": image.entropy(),
            "chroma": np.percentile((pixels.max(-1) - pixels.min(-1)) / 255, 99)}


def _thumbnails() -> np.ndarray:
    """Photo crops, their grey, dark and flat versions, black, white and noise."""
    photos = [sample_photo(i, SIDE) for i in range(6)]
    rng = np.random.default_rng(7)
    extra = [np.asarray(Image.fromarray(photos[0]).convert("L").convert("RGB")),
             (photos[1] * 0.15).astype(np.uint8),
             np.zeros((SIDE, SIDE, 3), np.uint8), np.full((SIDE, SIDE, 3), 255, np.uint8),
             np.full((SIDE, SIDE, 3), (30, 140, 200), np.uint8),
             rng.integers(0, 256, (SIDE, SIDE, 3), dtype=np.uint8)]
    return np.stack(photos + extra)


def test_measure_quality_matches_pillow_and_numpy():
    thumbnails = _thumbnails()
    for thumbnail, measured in zip(thumbnails, quality.measure_quality(thumbnails),
                                   strict=True):
        expected = _reference(thumbnail)
        # brightness sums float32 square roots (relative error < 1e-7); the rest is
        # exact arithmetic up to the last rounding.
        assert measured.brightness == pytest.approx(expected.pop("brightness"), abs=1e-7)
        assert {k: getattr(measured, k) for k in expected} == pytest.approx(
            expected, rel=1e-12, abs=1e-12)


def test_measure_quality_known_values_of_flat_images():
    black, white = np.zeros((1, SIDE, SIDE, 3), np.uint8), np.full((1, SIDE, SIDE, 3), 255,
                                                                  np.uint8)
    (dark,), (light,) = quality.measure_quality(black), quality.measure_quality(white)
    assert (dark.brightness_p99, dark.contrast, dark.sharpness, dark.chroma) == (0, 0, 0, 0)
    assert light.brightness_p5 == 1.0 and light.brightness == pytest.approx(1.0, abs=1e-7)
    # One colour per band: three equal histogram bins, log2(3) bits (cleanvision's note).
    assert dark.entropy == pytest.approx(np.log2(3), abs=1e-12)


def test_measure_quality_batch_equals_one_at_a_time():
    thumbnails = _thumbnails()
    assert quality.measure_quality(thumbnails) == [
        quality.measure_quality(thumbnail[None])[0] for thumbnail in thumbnails]


def test_measure_quality_empty_batch_and_wrong_shape():
    assert quality.measure_quality(np.zeros((0, SIDE, SIDE, 3), np.uint8)) == []
    with pytest.raises(ValueError, match=r"uint8 \[n, 32, 32, 3\].*\(2, 64, 64, 3\)"):
        quality.measure_quality(np.zeros((2, 64, 64, 3), np.uint8))
    with pytest.raises(ValueError, match="float32"):
        quality.measure_quality(np.zeros((1, SIDE, SIDE, 3), np.float32))


def test_image_quality_to_dict_rounds_every_fact():
    measured = quality.ImageQuality(1 / 3, 0.1234564, 0.1234566, 2 / 3, 12.3456789,
                                    9.87654321, 0.5)
    assert measured.to_dict() == {
        "brightness": 0.333333, "brightness_p5": 0.123456, "brightness_p99": 0.123457,
        "contrast": 0.666667, "sharpness": 12.345679, "entropy": 9.876543, "chroma": 0.5}
    assert tuple(measured.to_dict()) == quality.QUALITY_FACTS


# --- flags on files: real photo content, planted problems ---------------------------------

def _facts(data: bytes) -> dict:
    """A file's facts as the job takes them, with Pillow standing in for its resizes:
    upright RGB, shorter side 224 (bilinear), the centre 224 x 224 (the stored
    image), then 32 x 32 (box)."""
    with Image.open(io.BytesIO(data)) as image:
        mode = image.mode
        upright = ImageOps.exif_transpose(image).convert("RGB")
    width, height = upright.size
    scale = 224 / min(width, height)
    resized = upright.resize((round(width * scale), round(height * scale)),
                             Image.Resampling.BILINEAR, reducing_gap=2.0)
    left, top = ((side - 224) // 2 for side in resized.size)
    stored = resized.crop((left, top, left + 224, top + 224))
    thumbnail = np.asarray(stored.resize((SIDE, SIDE), Image.Resampling.BOX))
    (measured,) = quality.measure_quality(thumbnail[None])
    return {"width": width, "height": height, "mode": mode, **measured.to_dict(),
            "thumbnail": thumbnail}


def _grey_jpeg(pixels: np.ndarray, mode: str) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(pixels).convert("L").convert(mode).save(buf, "JPEG", quality=90)
    return buf.getvalue()


# Clean crops: a pagoda and a flower, 240-320 px.
CLEAN = {f"clean{i}": (i, (240 + 20 * i, 320 - 10 * i)) for i in range(4)}


def _files() -> dict[str, bytes]:
    photos = {name: sample_photo(index, size) for name, (index, size) in CLEAN.items()}
    photo = photos["clean0"].astype(np.float64)
    flat = np.full((260, 300, 3), (90, 160, 60), np.float64)
    # 16 px of 260: 2 pixels of the 32 px thumbnail, a blur the rule finds.
    blurred = Image.fromarray(photos["clean1"]).filter(ImageFilter.GaussianBlur(16))
    return {**{name: encode_image(p, "jpeg") for name, p in photos.items()},
            "dark": encode_image((photo * 0.15).round().astype(np.uint8), "jpeg"),
            "light": encode_image((255 - 0.02 * (255 - photo)).round().astype(np.uint8),
                                  "jpeg"),
            "blurry": encode_image(np.asarray(blurred), "jpeg"),
            "blank": encode_image(np.clip(flat + np.random.default_rng(3).normal(
                0, 2, flat.shape), 0, 255).round().astype(np.uint8), "jpeg"),
            "tiny": encode_image(sample_photo(5, 24), "jpeg"),
            "panoramic": encode_image(sample_photo(6, (140, 560)), "jpeg"),
            "grey_mode_l": _grey_jpeg(photos["clean2"], "L"),
            "grey_rgb": _grey_jpeg(photos["clean3"], "RGB")}


@pytest.fixture(scope="module")
def facts() -> dict[str, dict]:
    return {name: _facts(data) for name, data in _files().items()}


@pytest.fixture(scope="module")
def flags(facts) -> dict[str, dict]:
    bounds = quality.size_bounds([quality.image_size(f["width"], f["height"])
                                  for f in facts.values()])
    return {name: quality.image_flags(f, bounds) for name, f in facts.items()}


def test_image_flags_leave_clean_photos_unflagged(flags):
    assert {name: flags[name] for name in CLEAN} == {name: {} for name in CLEAN}


@pytest.mark.parametrize("name, flag, measure", [
    ("dark", "dark", "brightness_p99"), ("light", "light", "brightness_p5"),
    ("blurry", "blurry", "sharpness"), ("blank", "low_information", "entropy")])
def test_image_flags_find_planted_problems(facts, flags, name, flag, measure):
    # The value reported is the measure, as Pillow and NumPy give it on the thumbnail.
    expected = _reference(facts[name]["thumbnail"])[measure]
    assert flags[name][flag] == pytest.approx(expected, abs=1e-6)


def test_image_flags_blank_image_is_low_information_not_blurry(flags):
    assert "low_information" in flags["blank"] and "blurry" not in flags["blank"]


def test_image_flags_tiny_image_is_odd_size(flags):
    assert flags["tiny"]["odd_size"] == 24.0
    assert all("odd_size" not in flags[name] for name in CLEAN)


def test_image_flags_panoramic_image_is_odd_aspect_ratio(flags):
    assert flags["panoramic"] == {"odd_aspect_ratio": 0.25}


def test_image_flags_grayscale_by_mode_and_by_chroma(flags):
    assert flags["grey_mode_l"] == {"grayscale": "L"}
    # Stored as RGB: equal channels before the JPEG encode, and after its decode.
    assert flags["grey_rgb"] == {"grayscale": 0.0}


# --- flag rules on literal facts ---------------------------------------------------------

FACTS = {"width": 400, "height": 300, "mode": "RGB", "brightness": 0.45,
         "brightness_p5": 0.1, "brightness_p99": 0.8, "contrast": 0.2, "sharpness": 60.0,
         "entropy": 8.5, "chroma": 0.4}


def test_image_flags_follow_flag_names_order():
    bad = {**FACTS, "width": 1200, "mode": "L", "brightness_p99": 0.1, "brightness_p5": 0.99,
           "sharpness": 5.0, "entropy": 1.0}
    assert list(quality.image_flags(bad, (100.0, 500.0))) == list(quality.FLAG_NAMES)
    assert quality.image_flags(FACTS, (100.0, 500.0)) == {}


def test_image_flags_use_the_thresholds_given():
    strict = quality.FlagThresholds(dark_brightness_p99=0.9, grayscale_chroma=0.5)
    assert quality.image_flags(FACTS, None, strict) == {"dark": 0.8, "grayscale": 0.4}


@pytest.mark.parametrize("mode", ["L", "LA", "1", "I", "I;16", "F"])
def test_image_flags_grey_modes(mode):
    assert quality.image_flags({**FACTS, "mode": mode}, None) == {"grayscale": mode}


def test_size_bounds_with_no_spread_flags_any_other_size():
    bounds = quality.size_bounds([300.0] * 5)
    assert bounds == (300.0, 300.0)

    def sized(width: int, height: int) -> dict:
        return quality.image_flags({**FACTS, "width": width, "height": height}, bounds)

    assert sized(300, 300) == {}
    assert sized(301, 300) == {"odd_size": pytest.approx(np.sqrt(301 * 300), abs=1e-6)}
    assert sized(299, 300) == {"odd_size": pytest.approx(np.sqrt(299 * 300), abs=1e-6)}


def test_size_bounds_with_spread_are_three_iqrs_on_the_log_size():
    sizes = [300.0, 340.0, 420.0, 480.0, 520.0, 600.0]
    q1, q3 = np.percentile(sizes, [25, 75])
    low, high = np.exp(np.log(q1) - 3 * np.log(q3 / q1)), np.exp(np.log(q3) + 3 * np.log(q3 / q1))
    assert quality.size_bounds(sizes) == pytest.approx((low, high), rel=1e-12)
    assert quality.size_bounds(sizes, iqr_factor=0) == pytest.approx((q1, q3), rel=1e-12)
    with pytest.raises(ValueError, match="sizes > 0"):
        quality.size_bounds([])


def test_image_flags_odd_aspect_ratio_threshold():
    wide = quality.image_flags({**FACTS, "width": 800, "height": 200}, None)
    assert wide == {"odd_aspect_ratio": 0.25}
    assert quality.image_flags({**FACTS, "width": 200, "height": 560}, None) == {}
