"""Image-quality measures and flags, against Pillow, SciPy and NumPy computed here:
Pillow's ``ImageStat`` and ``Image.entropy``, SciPy's ``uniform_filter1d`` and NumPy's
percentiles on the same thumbnails, never the code under test; flags on planted
dark, light, blurred, blank, tiny, panoramic and grey images among real photo content
(crops of scikit-learn's sample photos)."""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image, ImageFilter, ImageOps, ImageStat
from scipy.ndimage import uniform_filter1d

from etl.images import quality
from etl.testing import encode_image, sample_photo

SIDE = quality.QUALITY_THUMBNAIL_SIZE
LUMA = quality.SHARPNESS_THUMBNAIL_SIZE


def _reference_sharpness(luma: np.ndarray) -> float:
    """The share of the neighbour differences a centred 3-pixel mean removes, the
    smallest of the two axes' of the luma and of its 2 x 2 means, over the
    differences whose both ends the mean is defined at."""
    half = luma.shape[0] // 2
    means = luma[:2 * half, :2 * half].astype(np.float64).reshape(
        half, 2, half, 2).mean(axis=(1, 3))
    return min(_removed_share(luma.astype(np.float64)), _removed_share(means))


def _removed_share(values: np.ndarray) -> float:
    shares = []
    for axis in (0, 1):
        blurred = uniform_filter1d(values, 3, axis=axis)
        inner = np.arange(1, values.shape[axis] - 2)
        d = np.take(np.abs(np.diff(values, axis=axis)), inner, axis=axis)
        d3 = np.take(np.abs(np.diff(blurred, axis=axis)), inner, axis=axis)
        shares.append(np.maximum(d - d3, 0).sum() / d.sum() if d.sum() else 0.0)
    return min(shares)


def _reference(thumbnail: np.ndarray, luma: np.ndarray) -> dict[str, float]:
    """Each measure of one ``uint8 [32, 32, 3]`` thumbnail and its ``uint8 [160,
    160]`` luma, from its definition."""
    pixels = thumbnail.astype(np.float64)
    brightness = np.sqrt(0.241 * pixels[..., 0] ** 2 + 0.691 * pixels[..., 1] ** 2
                         + 0.068 * pixels[..., 2] ** 2) / 255
    image = Image.fromarray(thumbnail)
    grey = image.convert("L")
    return {"brightness": brightness.mean(),
            "brightness_p5": np.percentile(brightness, 5),
            "brightness_p99": np.percentile(brightness, 99),
            "contrast": ImageStat.Stat(grey).stddev[0] / 255,
            "sharpness": _reference_sharpness(luma),
            "entropy": image.entropy(),
            "chroma": np.percentile((pixels.max(-1) - pixels.min(-1)) / 255, 99)}


def _lumas(thumbnails: np.ndarray) -> np.ndarray:
    """A ``uint8 [160, 160]`` luma for each thumbnail: its Pillow grey, enlarged."""
    return np.stack([np.asarray(Image.fromarray(t).convert("L").resize(
        (LUMA, LUMA), Image.Resampling.BICUBIC)) for t in thumbnails])


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
    lumas = _lumas(thumbnails)
    for thumbnail, luma, measured in zip(
            thumbnails, lumas, quality.measure_quality(thumbnails, lumas), strict=True):
        expected = _reference(thumbnail, luma)
        # brightness sums float32 square roots (relative error < 1e-7); the rest is
        # exact arithmetic up to the last rounding.
        assert measured.brightness == pytest.approx(expected.pop("brightness"), abs=1e-7)
        assert {k: getattr(measured, k) for k in expected} == pytest.approx(
            expected, rel=1e-12, abs=1e-12)


def test_measure_quality_known_values_of_flat_images():
    black, white = np.zeros((1, SIDE, SIDE, 3), np.uint8), np.full((1, SIDE, SIDE, 3), 255,
                                                                  np.uint8)
    (dark,), (light,) = (quality.measure_quality(black, _lumas(black)),
                         quality.measure_quality(white, _lumas(white)))
    assert (dark.brightness_p99, dark.contrast, dark.sharpness, dark.chroma) == (0, 0, 0, 0)
    assert light.brightness_p5 == 1.0 and light.brightness == pytest.approx(1.0, abs=1e-7)
    # One colour per band: three equal histogram bins, log2(3) bits (cleanvision's note).
    assert dark.entropy == pytest.approx(np.log2(3), abs=1e-12)


def test_measure_quality_batch_equals_one_at_a_time():
    thumbnails = _thumbnails()
    lumas = _lumas(thumbnails)
    assert quality.measure_quality(thumbnails, lumas) == [
        quality.measure_quality(thumbnail[None], luma[None])[0]
        for thumbnail, luma in zip(thumbnails, lumas, strict=True)]


def test_measure_quality_empty_batch_and_wrong_shape():
    lumas = np.zeros((2, LUMA, LUMA), np.uint8)
    assert quality.measure_quality(np.zeros((0, SIDE, SIDE, 3), np.uint8), lumas[:0]) == []
    with pytest.raises(ValueError, match=r"uint8 \[n, 32, 32, 3\].*\(2, 64, 64, 3\)"):
        quality.measure_quality(np.zeros((2, 64, 64, 3), np.uint8), lumas)
    with pytest.raises(ValueError, match="float32"):
        quality.measure_quality(np.zeros((1, SIDE, SIDE, 3), np.float32), lumas[:1])
    with pytest.raises(ValueError, match=r"uint8 \[1, side, side\].*\(2, 160, 160\)"):
        quality.measure_quality(np.zeros((1, SIDE, SIDE, 3), np.uint8), lumas)


def test_sharpness_side_is_160_or_the_stored_image_when_smaller():
    assert [quality.sharpness_side(size) for size in (224, 512, 160, 96)] == [160, 160, 160, 96]


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
    image), then 32 x 32 and 160 x 160 (box; the latter's luma rounded once)."""
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
    small = np.asarray(stored.resize((LUMA, LUMA), Image.Resampling.BOX), np.float64)
    luma = np.round(small @ [0.299, 0.587, 0.114]).astype(np.uint8)
    (measured,) = quality.measure_quality(thumbnail[None], luma[None])
    return {"width": width, "height": height, "mode": mode, **measured.to_dict(),
            "thumbnail": thumbnail, "luma": luma}


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
    expected = _reference(facts[name]["thumbnail"], facts[name]["luma"])[measure]
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


# Planted blurs at the stored size, made as scripts/benchmarks/blur_flag.py plants them
# in web photos: a Gaussian of sigma px of the 224 px stored image (Pillow's radius sigma x
# shorter side / 224 at the file's size), saved as JPEG. Sample-photo crops of web
# sizes; FlagThresholds() was chosen on 2,000 web photos, not on these.
BLUR_SIZES = ((300, 400), (480, 360), (420, 560), (600, 450), (350, 350), (400, 600),
              (330, 500), (560, 420))


@pytest.fixture(scope="module")
def blur_flags() -> dict[float, list[bool]]:
    """Whether ``blurry`` is raised on each photo, per planted sigma (0: the original)."""
    flags: dict[float, list[bool]] = {}
    for sigma in (0.0, 2.0, 3.0):
        flags[sigma] = []
        for index, size in enumerate(BLUR_SIZES):
            photo = Image.fromarray(sample_photo(20 + index, size, seed=5))
            if sigma:
                photo = photo.filter(ImageFilter.GaussianBlur(sigma * min(size) / 224))
            facts = _facts(encode_image(np.asarray(photo), "jpeg"))
            flags[sigma].append("blurry" in quality.image_flags(facts, None))
    return flags


def test_image_flags_blurry_leaves_the_sharp_originals_unflagged(blur_flags):
    assert blur_flags[0.0] == [False] * len(BLUR_SIZES)


def test_image_flags_blurry_finds_planted_gaussian_blurs_of_3_px(blur_flags):
    assert blur_flags[3.0] == [True] * len(BLUR_SIZES)


def test_image_flags_blurry_finds_most_planted_gaussian_blurs_of_2_px(blur_flags):
    # 2 px is where the rule starts to find blurs: 0.78 of the web photos' (KNOW_YOUR_DATA).
    assert sum(blur_flags[2.0]) >= len(BLUR_SIZES) // 2, blur_flags[2.0]


def test_image_flags_strong_blur_is_blurry_not_sharp_again():
    # At 160 px a strong blur leaves only rounding noise between neighbours, which
    # the re-blur removes as it would edges; the 80 px half still sees its ramps.
    size = CLEAN["clean1"][1]
    photo = Image.fromarray(sample_photo(CLEAN["clean1"][0], size))
    for sigma in (6.0, 12.0, 20.0):
        blurred = photo.filter(ImageFilter.GaussianBlur(sigma * min(size) / 224))
        facts = _facts(encode_image(np.asarray(blurred), "jpeg"))
        assert "blurry" in quality.image_flags(facts, None), (sigma, facts["sharpness"])


# --- flag rules on literal facts ---------------------------------------------------------

FACTS = {"width": 400, "height": 300, "mode": "RGB", "brightness": 0.45,
         "brightness_p5": 0.1, "brightness_p99": 0.8, "contrast": 0.2, "sharpness": 0.4,
         "entropy": 8.5, "chroma": 0.4}


def test_image_flags_follow_flag_names_order():
    bad = {**FACTS, "width": 1200, "mode": "L", "brightness_p99": 0.1, "brightness_p5": 0.99,
           "sharpness": 0.05, "entropy": 1.0}
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
