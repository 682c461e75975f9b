"""Image-quality measures from a 32 x 32 thumbnail, and cleanvision's flag rules on them.

The shard step's graph gives each written image's ``uint8 [32, 32, 3]`` quality
thumbnail: the stored image area-averaged to 32 x 32, the colour thumbnail whose gray
levels the perceptual hash reads (``codec.thumbnails``), so one resize serves both,
and the ``uint8 [160, 160]`` luma the sharpness reads. :func:`measure_quality` takes a
batch of them (NumPy only, on the shard step's transform threads; vectorised across
the batch: the sharpness about 0.1-0.3 ms per image, the others 0.03 ms) and gives
per image:

* ``brightness``, ``brightness_p5``, ``brightness_p99``: the mean and the 5th / 99th
  percentiles (NumPy's default ``linear`` definition, Hyndman-Fan type 7) of the per-pixel
  perceived brightness
  ``b = sqrt(0.241 R^2 + 0.691 G^2 + 0.068 B^2) / 255`` (the "HSP" model cleanvision
  uses; a grey level ``v`` gives ``v / 255``).
* ``contrast``: the standard deviation (population) of ``L / 255``, ``L`` being
  Pillow's ``convert("L")``: ITU-R 601 luma ``(19595 R + 38470 G + 7471 B + 2^15) >> 16``.
* ``sharpness``: how much of the image's fine detail a slight blur removes, from the
  luma of the stored image area-averaged to 160 x 160 (``codec.sharpness_thumbnail``;
  :func:`sharpness_side`): along each axis, with ``d`` the absolute differences of
  neighbouring pixels and ``d3`` those of the image re-blurred by a 3-pixel box, the
  share ``sum(max(0, d - d3)) / sum(d)`` of the differences the re-blur removes; the
  smaller of the two axes, and of this luma and its 2 x 2 means (80 px: a strong
  blur leaves only rounding noise between neighbours at 160 px, which the re-blur
  removes as it would edges). A sharp photo loses much of its variation to the
  re-blur (sharp crops of the sample photos: 0.29-0.52), an already blurred one
  little (the "blur effect" of Crete-Roffet et al. 2007,
  ``skimage.measure.blur_effect``, is 1 - this, with a larger filter); 0 for an
  image without any variation. Exact: integer sums, one division per axis.
  cleanvision's edge score at 32 or 64 px cannot tell a Gaussian blur of 2 px at
  224 px from a soft clean photo (``scripts/benchmarks/blur_flag.py``).
* ``entropy``: Pillow's ``Image.entropy()`` of the RGB thumbnail, in bits: over the
  768-bin concatenation of the three band histograms (at most log2(768) = 9.58; one
  flat colour gives log2(3) = 1.58).
* ``chroma``: the 99th percentile (``linear``) over pixels of
  ``(max(R, G, B) - min(R, G, B)) / 255``: how much colour the most colourful 1 % of
  the pixels have; an RGB file of a grey photo scores about 0.

Every measure but ``entropy`` is the same on every machine: integer sums, then one
correctly rounded square root, division or interpolation (``brightness`` sums float32
square roots, which float64 adds exactly). ``entropy`` sums floats (a ``c log2 c``
table), whose last bits may differ between machines and NumPy builds.
:meth:`ImageQuality.to_dict` rounds every value to ``QUALITY_DECIMALS`` places, so the
facts written are the same.

:func:`image_flags` applies cleanvision's seven rules (``FLAG_NAMES``) to one image's
facts, with thresholds measured on these thumbnails (:class:`FlagThresholds`, from
``scripts/measure_quality_thresholds.py``, in git at ``8c088d6``, and
``scripts/benchmarks/blur_flag.py``); ``odd_size`` compares
``sqrt(width * height)`` with :func:`size_bounds` of the whole dataset. Flags report;
they never drop an image.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from reader.format import contract

# The side of the perceptual hash's thumbnail (imagehash's recipe), which the measures share.
QUALITY_THUMBNAIL_SIZE = 32
# The side of the luma thumbnail the sharpness reads: at 224 px a Gaussian blur of 2 px
# is 1.4 px of it, which the 32 and 64 px thumbnails average away
# (scripts/benchmarks/blur_flag.py).
SHARPNESS_THUMBNAIL_SIZE = 160
# Its re-blur: a box of this many pixels along each axis.
_REBLUR = 3
QUALITY_FACTS = ("brightness", "brightness_p5", "brightness_p99", "contrast", "sharpness",
                 "entropy", "chroma")
# Decimal places of the facts written: far below any threshold's resolution, far above
# the last-bit differences of float sums between machines.
QUALITY_DECIMALS = 6

_PIXELS = QUALITY_THUMBNAIL_SIZE * QUALITY_THUMBNAIL_SIZE
# HSP weights x 1000: 1000 b^2 255^2 = 241 R^2 + 691 G^2 + 68 B^2, an exact integer.
_HSP_WEIGHTS = (241, 691, 68)
_HSP_SCALE = 255.0 * math.sqrt(1000.0)
# Pillow's RGB -> L (Convert.c, L24): 16-bit fixed-point ITU-R 601 weights, rounded.
_LUMA_WEIGHTS = (19595, 38470, 7471)
# 0-based positions of NumPy's linear percentiles among the sorted pixels: (n - 1) p.
_P5, _P99 = 0.05 * (_PIXELS - 1), 0.99 * (_PIXELS - 1)
# c log2 c for every count a band histogram bin can hold (0 log 0 = 0).
_HISTOGRAM_TOTAL = 3 * _PIXELS
_C_LOG2_C = np.concatenate(
    [[0.0], np.arange(1, _HISTOGRAM_TOTAL + 1) * np.log2(np.arange(1, _HISTOGRAM_TOTAL + 1))])


@dataclasses.dataclass(frozen=True)
class ImageQuality:
    """One image's quality measures (see the module docstring)."""

    brightness: float
    brightness_p5: float
    brightness_p99: float
    contrast: float
    sharpness: float
    entropy: float
    chroma: float

    def to_dict(self) -> dict[str, float]:
        """The facts, each rounded to ``QUALITY_DECIMALS`` places (``QUALITY_FACTS`` order)."""
        return {name: round(getattr(self, name), QUALITY_DECIMALS) for name in QUALITY_FACTS}


def _lerp(low: np.ndarray, high: np.ndarray, position: float) -> np.ndarray:
    """A linear percentile at 0-based ``position`` among the sorted values, from the
    order statistics ``low`` and ``high`` at its floor and the next one, interpolated
    as NumPy does (``numpy.lib._function_base_impl._lerp``)."""
    fraction = position - math.floor(position)
    diff = high - low
    if fraction >= 0.5:
        return high - diff * (1.0 - fraction)
    return low + diff * fraction


def _brightness(rgb: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Mean, p5 and p99 of the HSP brightness of ``int32 [3, n, pixels]`` channel planes.

    The percentiles are taken on the exact integer ``w = 1000 (255 b)^2`` (its order is
    b's); the two order statistics around each become b in float64, then interpolate.
    The mean sums each pixel's ``sqrt(w)`` as float32 (relative error < 1e-7): every
    such value >= 1 is a multiple of 2^-23 and the sum stays below 2^25, so the float64
    sum is exact in any order, the same on every machine."""
    weighted = sum(weight * channel * channel for weight, channel in zip(
        _HSP_WEIGHTS, rgb, strict=True))
    roots = np.sqrt(weighted.astype(np.float32))
    mean = roots.sum(axis=1, dtype=np.float64) / (_PIXELS * _HSP_SCALE)
    ordered = np.sort(weighted, axis=1)  # NumPy's SIMD int32 sort beats a partition here
    p5, p99 = (_lerp(*(np.sqrt(ordered[:, math.floor(p) + i], dtype=np.float64) / _HSP_SCALE
                       for i in (0, 1)), p) for p in (_P5, _P99))
    return mean, p5, p99


def _variance_times_count(values: np.ndarray) -> np.ndarray:
    """``count^2 var`` of each row of ``int32 [n, count]`` levels (0..255), exactly:
    ``count sum(v^2) - sum(v)^2`` (the row sums of squares fit int32 for count <=
    4096, and einsum sums them without a temporary)."""
    total = values.sum(axis=1, dtype=np.int64)
    squares = np.einsum("ij,ij->i", values, values).astype(np.int64)
    return values.shape[1] * squares - total * total


def _contrast(rgb: np.ndarray) -> np.ndarray:
    """Std of Pillow's luma / 255, from exact integer sums."""
    luma = (sum(w * c for w, c in zip(_LUMA_WEIGHTS, rgb, strict=True)) + (1 << 15)) >> 16
    return np.sqrt(_variance_times_count(luma)) / (_PIXELS * 255.0)


def sharpness_side(image_size: int) -> int:
    """The side of the sharpness's luma thumbnail of a ``image_size`` px stored image:
    ``SHARPNESS_THUMBNAIL_SIZE``, or the stored image itself when smaller (an
    enlarged image would look blurred)."""
    return min(SHARPNESS_THUMBNAIL_SIZE, image_size)


def _removed_share(grey: np.ndarray) -> np.ndarray:
    """The share of the neighbour differences a ``_REBLUR`` box removes along each
    axis of ``int16 [n, side, side]`` levels, the smaller axis's (module docstring):
    ``sum(max(0, 3 d - |box sum differences|)) / (3 sum(d))``, exactly (0 where
    nothing varies). Sliced along each axis, never transposed: a transposed copy
    and its reshapes cost three times the arithmetic."""
    h = _REBLUR
    shares = []
    for axis in (1, 2):
        def cut(start: int, stop: int | None, axis: int = axis) -> tuple[slice, ...]:
            index = [slice(None)] * 3
            index[axis] = slice(start, stop)
            return tuple(index)

        side = grey.shape[axis]
        box = sum(grey[cut(i, side - h + 1 + i)] for i in range(h))
        # The differences between rows i and i + 1 for i = 1 .. side - 3, where the
        # box's, centred on each row, are defined too.
        diffs = np.abs(grey[cut(2, side - 1)] - grey[cut(1, side - 2)])
        kept = np.abs(box[cut(1, None)] - box[cut(0, -1)])
        total = h * diffs.sum(axis=(1, 2), dtype=np.int64)
        removed = np.maximum(h * diffs - kept, 0).sum(axis=(1, 2), dtype=np.int64)
        shares.append(np.where(total > 0, removed / np.maximum(total, 1), 0.0))
    return np.minimum(*shares)


def _sharpness(luma: np.ndarray) -> np.ndarray:
    """:func:`_removed_share` of each ``uint8 [n, side, side]`` luma and of its 2 x 2
    sums (half the side), the smaller: a strong blur leaves differences of a level or
    two at full size, rounding noise that the re-blur removes too, but ramps at half."""
    grey = luma.astype(np.int16)  # 2 x 2 sums of levels, and 3 x their differences, fit
    half = grey.shape[1] // 2
    even = grey[:, :2 * half, :2 * half]
    sums = even[:, 0::2, 0::2] + even[:, 1::2, 0::2] + even[:, 0::2, 1::2] + even[:, 1::2, 1::2]
    return np.minimum(_removed_share(grey), _removed_share(sums))


def _entropy(rgb: np.ndarray) -> np.ndarray:
    """Pillow's ``Image.entropy()`` of each image of ``int32 [3, n, pixels]`` channel
    planes: over its 768-bin band histogram, all counted in one bincount."""
    n = rgb.shape[1]
    bins = (256 * np.arange(3, dtype=np.int32)[:, None] + 768 * np.arange(n, dtype=np.int32))
    counts = np.bincount((rgb + bins[:, :, None]).ravel(), minlength=768 * n)
    sums = _C_LOG2_C[counts].reshape(n, 768).sum(axis=1)
    return math.log2(_HISTOGRAM_TOTAL) - sums / _HISTOGRAM_TOTAL


def _chroma(rgb: np.ndarray) -> np.ndarray:
    """The p99 of (max - min channel) / 255 per image of ``int32 [3, n, pixels]``."""
    spread = (rgb.max(axis=0) - rgb.min(axis=0)).astype(np.int16)
    ordered = np.sort(spread, axis=1)  # int16: NumPy's SIMD sort, faster than a partition
    below = math.floor(_P99)
    return _lerp(ordered[:, below].astype(np.float64),
                 ordered[:, below + 1].astype(np.float64), _P99) / 255.0


def measure_quality(thumbnails: np.ndarray, lumas: np.ndarray) -> list[ImageQuality]:
    """The quality measures of each ``uint8 [32, 32, 3]`` thumbnail of ``[n, 32, 32, 3]``
    and its stored image's ``uint8 [side, side]`` luma thumbnail of ``lumas`` (the
    sharpness's, ``side`` = :func:`sharpness_side` of the stored size).

    Raises:
        ValueError: ``thumbnails`` is not ``uint8 [n, 32, 32, 3]`` or ``lumas`` not
            ``uint8 [n, side, side]``.

    Example::

        facts = [q.to_dict() for q in measure_quality(thumbnails, lumas)]
    """
    side = QUALITY_THUMBNAIL_SIZE
    if thumbnails.dtype != np.uint8 or thumbnails.shape[1:] != (side, side, 3):
        raise ValueError(f"Expected uint8 [n, {side}, {side}, 3] quality thumbnails, got "
                         f"{thumbnails.dtype} {thumbnails.shape}.")
    if (lumas.dtype != np.uint8 or lumas.ndim != 3 or len(lumas) != len(thumbnails)
            or lumas.shape[1] != lumas.shape[2]):
        raise ValueError(f"Expected uint8 [{len(thumbnails)}, side, side] luma thumbnails, "
                         f"got {lumas.dtype} {lumas.shape}.")
    if not len(thumbnails):
        return []
    # [3, n, pixels]: one contiguous plane per channel, wide enough for exact sums.
    rgb = thumbnails.reshape(len(thumbnails), _PIXELS, 3).transpose(2, 0, 1).astype(
        np.int32, order="C")
    mean, p5, p99 = _brightness(rgb)
    columns = (mean, p5, p99, _contrast(rgb), _sharpness(lumas), _entropy(rgb), _chroma(rgb))
    return [ImageQuality(*values) for values in zip(*(c.tolist() for c in columns), strict=True)]


# --- flags -------------------------------------------------------------------------------

# cleanvision's issue names, in its order (the contract's: the report lists them).
FLAG_NAMES = contract.QUALITY_FLAGS
# Pillow modes of one grey channel (LA, La: with alpha): a file stored as grey.
GRAYSCALE_MODES = frozenset({"1", "L", "LA", "La", "I", "I;16", "I;16L", "I;16B", "I;16N",
                             "F"})


@dataclasses.dataclass(frozen=True)
class FlagThresholds:
    """The flag rules' thresholds (:func:`image_flags` says how each is used), chosen
    by ``scripts/measure_quality_thresholds.py`` (in git at ``8c088d6``) on 500 clean
    photos (200 crops of the sample photos, 300 web photos; docs/KNOW_YOUR_DATA.md) and
    planted problems; ``blurry``'s by ``scripts/benchmarks/blur_flag.py``.
    Where they differ from cleanvision's defaults, and why:

    * ``dark``: p99 < 0.22 (cleanvision 0.32). The darkest clean photos (dim,
      out-of-focus foliage) reach 0.252; a photo scaled by f <= 0.2 (2.3 stops or more
      under-exposed) stays below 0.2, whatever its content (b scales with the pixels).
    * ``light``: p5 > 0.96 (0.95). All-sky crops reach 0.954; a photo washed out as
      ``255 - f (255 - v)`` with f < 0.04 is above (b >= 1 - f at every pixel).
    * ``blurry``: sharpness < 0.15 with contrast >= 0.11 (cleanvision: its own score
      < 0.29). ``scripts/benchmarks/blur_flag.py``: of the 2,000 web photos the rule
      applies to, the softest (crops of a flower's out-of-focus background enlarged
      about 4 times) measure 0.154; 0.15 finds about four in five Gaussian blurs of 2
      px of the 224 px stored image, more of stronger ones. The contrast minimum is
      cleanvision's narrow-histogram exception (std of its 256 bin counts > 19.85:
      for its 4096 pixels of a Gaussian histogram, a contrast below 0.11): it keeps
      dark, washed-out and blank images from being called blurry.
    * ``low_information``: entropy < 4.0 bits (3.0 at full size). The thumbnail's area
      average removes most of a blank image's noise: flat colours with noise of sigma
      1-4 levels measure <= 2.88 bits (sigma 12 still < 4), clean photos >= 4.54.
    * ``odd_size``: 3 IQRs, on the log size (:func:`size_bounds`).
    * ``odd_aspect_ratio``: 0.35, cleanvision's.
    * ``grayscale``: a grey mode, or chroma < 0.01 (cleanvision: mode L only). RGB
      JPEGs of grey photos decode to equal channels (chroma 0 at quality 30-95);
      clean photos measure >= 0.078.
    """

    dark_brightness_p99: float = 0.22
    light_brightness_p5: float = 0.96
    blurry_sharpness: float = 0.15
    blurry_min_contrast: float = 0.11
    low_information_entropy: float = 4.0
    odd_size_iqr_factor: float = 3.0
    odd_aspect_ratio: float = 0.35
    grayscale_chroma: float = 0.01


def image_size(width: int, height: int) -> float:
    """cleanvision's size of an image, ``sqrt(width * height)``: one correctly rounded
    square root of an exact integer, the same on every machine."""
    return math.sqrt(width * height)


def size_bounds(sizes: Sequence[float], iqr_factor: float = 3.0) -> tuple[float, float]:
    """The ``odd_size`` range of a dataset's :func:`image_size` values: its quartiles
    q1, q3 (NumPy's ``linear`` percentiles, as cleanvision) widened by ``iqr_factor``
    IQRs on a log scale, ``[q1 / r^f, q3 r^f]`` with ``r = q3 / q1``. cleanvision
    widens on a linear scale, ``[q1 - f IQR, q3 + f IQR]``; sizes spread by factors, and
    for photos of 300-1300 px its lower bound is negative, so no image is ever too
    small. When every size is the same (``r`` = 1) the range is that size: any other
    size is odd, as in cleanvision.

    Raises:
        ValueError: ``sizes`` is empty or holds a size <= 0.
    """
    values = np.asarray(sizes, dtype=np.float64)
    if not len(values) or values.min() <= 0:
        raise ValueError(f"size_bounds needs image sizes > 0, got {len(values)} sizes "
                         f"(smallest {values.min() if len(values) else None}).")
    q1, q3 = np.percentile(values, [25.0, 75.0]).tolist()
    widen = (q3 / q1) ** iqr_factor
    return q1 / widen, q3 * widen


def image_flags(facts: Mapping[str, Any], size_range: tuple[float, float] | None,
                thresholds: FlagThresholds = FlagThresholds()) -> dict[str, float | str]:
    """The flags one image's facts raise: flag name → the value that raised it, in
    ``FLAG_NAMES`` order (empty when none). ``size_range`` is :func:`size_bounds` of
    the dataset (``None``: no ``odd_size`` rule). Rules (``t`` = ``thresholds``):

    * ``dark``: ``brightness_p99 < t.dark_brightness_p99`` → brightness_p99;
    * ``light``: ``brightness_p5 > t.light_brightness_p5`` → brightness_p5;
    * ``blurry``: ``sharpness < t.blurry_sharpness`` and ``contrast >=
      t.blurry_min_contrast`` (a flat image has no edges either: it is
      low_information, not blurry) → sharpness;
    * ``low_information``: ``entropy < t.low_information_entropy`` → entropy;
    * ``odd_size``: ``sqrt(width * height)`` outside ``size_range`` → that size;
    * ``odd_aspect_ratio``: ``min(w / h, h / w) < t.odd_aspect_ratio`` → that ratio;
    * ``grayscale``: the file's ``mode`` is grey (``GRAYSCALE_MODES``) → the mode;
      otherwise ``chroma < t.grayscale_chroma`` → chroma.

    Example::

        image_flags({"width": 800, "height": 200, "mode": "L", ...}, (60.0, 4000.0))
        # {"odd_aspect_ratio": 0.25, "grayscale": "L"}
    """
    t = thresholds
    width, height = facts["width"], facts["height"]
    size, aspect = image_size(width, height), min(width / height, height / width)
    grey_mode = facts["mode"] in GRAYSCALE_MODES
    rules: tuple[tuple[str, bool, float | str], ...] = (
        ("dark", facts["brightness_p99"] < t.dark_brightness_p99, facts["brightness_p99"]),
        ("light", facts["brightness_p5"] > t.light_brightness_p5, facts["brightness_p5"]),
        ("blurry", facts["sharpness"] < t.blurry_sharpness
         and facts["contrast"] >= t.blurry_min_contrast, facts["sharpness"]),
        ("low_information", facts["entropy"] < t.low_information_entropy, facts["entropy"]),
        ("odd_size", size_range is not None
         and not size_range[0] <= size <= size_range[1], size),
        ("odd_aspect_ratio", aspect < t.odd_aspect_ratio, aspect),
        ("grayscale", grey_mode or facts["chroma"] < t.grayscale_chroma,
         facts["mode"] if grey_mode else facts["chroma"]),
    )
    return {name: round(value, QUALITY_DECIMALS) if isinstance(value, float) else value
            for name, raised, value in rules if raised}
