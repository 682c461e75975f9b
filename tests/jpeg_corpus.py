"""A corpus of JPEG layouts cut from real photo content, for the decoder-agreement and
serving-parity tests of the one-decode path (etl/images/loading.py, etl/images/shards.py).

Every file is a crop of one of scikit-learn's sample photos, saved by Pillow in one
layout: baseline or progressive, 4:4:4 / 4:2:2 / 4:2:0 chroma or grayscale, Huffman
tables optimised, restart markers every few blocks or rows; at sizes that are not
multiples of 8 or 16; with an EXIF orientation tag cycling through 1..8.
"""

from __future__ import annotations

import dataclasses
import io

import numpy as np
from PIL import Image

# (height, width): none a multiple of 8 or 16; one portrait, one tiny.
SIZES = ((757, 1001), (517, 333), (131, 250), (47, 61))

# name → Pillow save options (mode "L" for gray).
LAYOUTS: dict[str, dict[str, object]] = {
    "444": {"subsampling": 0},
    "422": {"subsampling": 1},
    "420": {"subsampling": 2},
    "444_progressive": {"subsampling": 0, "progressive": True},
    "422_progressive": {"subsampling": 1, "progressive": True},
    "420_progressive": {"subsampling": 2, "progressive": True},
    "420_optimized": {"subsampling": 2, "optimize": True},
    "420_restart_blocks": {"subsampling": 2, "restart_marker_blocks": 3},
    "422_restart_rows": {"subsampling": 1, "restart_marker_rows": 1},
    "gray": {"mode": "L"},
    "gray_progressive": {"mode": "L", "progressive": True},
}


@dataclasses.dataclass(frozen=True)
class CorpusJpeg:
    name: str
    layout: str
    height: int
    width: int
    orientation: int
    data: bytes


def _source(index: int) -> np.ndarray:
    from sklearn.datasets import load_sample_images

    return load_sample_images().images[index % 2]


def photo_crop(seed: int, height: int, width: int) -> np.ndarray:
    """``uint8 [height, width, 3]``: a crop of a sample photo, resized (bicubic) to the
    size when the photo is smaller, with mild noise so no two crops are alike."""
    rng = np.random.default_rng(seed)
    photo = _source(seed)
    scale = max(height / photo.shape[0], width / photo.shape[1], 1.0)
    if scale > 1.0:
        size = (int(np.ceil(photo.shape[1] * scale)), int(np.ceil(photo.shape[0] * scale)))
        photo = np.asarray(Image.fromarray(photo).resize(size, Image.Resampling.BICUBIC))
    top = int(rng.integers(0, photo.shape[0] - height + 1))
    left = int(rng.integers(0, photo.shape[1] - width + 1))
    crop = photo[top:top + height, left:left + width].astype(np.int16)
    noisy = crop + rng.normal(0, 3, crop.shape).round().astype(np.int16)
    return np.clip(noisy, 0, 255).astype(np.uint8)


def photo_window(seed: int, height: int, width: int, window: float = 0.5) -> np.ndarray:
    """``uint8 [height, width, 3]``: a window of a sample photo (``window`` of its
    largest window of this aspect ratio) resized (bicubic) to the size, with
    sensor-like noise: the content of a camera photo, at camera sizes."""
    rng = np.random.default_rng(seed)
    photo = _source(seed)
    aspect = width / height
    full_w = min(photo.shape[1], photo.shape[0] * aspect)
    w, h = max(1, round(full_w * window)), max(1, round(full_w * window / aspect))
    top = int(rng.integers(0, photo.shape[0] - h + 1))
    left = int(rng.integers(0, photo.shape[1] - w + 1))
    image = Image.fromarray(photo[top:top + h, left:left + w]).resize(
        (width, height), Image.Resampling.BICUBIC)
    noisy = np.asarray(image, np.float32) + rng.normal(0, 3, (height, width, 3)).astype(
        np.float32)
    return np.clip(np.round(noisy), 0, 255).astype(np.uint8)


def encode(pixels: np.ndarray, layout: str, orientation: int, quality: int = 90) -> bytes:
    """``pixels`` saved by Pillow in ``layout`` with an EXIF ``orientation`` tag."""
    options = dict(LAYOUTS[layout])
    image = Image.fromarray(pixels).convert(str(options.pop("mode", "RGB")))
    exif = Image.Exif()
    exif[0x0112] = orientation
    buf = io.BytesIO()
    image.save(buf, "JPEG", quality=quality, exif=exif, **options)
    return buf.getvalue()


def corpus() -> list[CorpusJpeg]:
    """Every layout at every size, orientations 1..8 in turn."""
    files = []
    for i, (layout, (height, width)) in enumerate(
            (layout, size) for layout in LAYOUTS for size in SIZES):
        orientation = i % 8 + 1
        data = encode(photo_crop(i, height, width), layout, orientation)
        files.append(CorpusJpeg(f"{layout}_{height}x{width}_o{orientation}", layout,
                                height, width, orientation, data))
    return files


def cmyk_jpeg(seed: int, height: int = 131, width: int = 250) -> bytes:
    """A CMYK JPEG (Adobe, as print workflows save them): outside the agreeing
    layouts, so the transform decodes it itself."""
    buf = io.BytesIO()
    Image.fromarray(photo_crop(seed, height, width)).convert("CMYK").save(
        buf, "JPEG", quality=90)
    return buf.getvalue()


def image_size_for_ratio(height: int, width: int, ratio: int) -> int | None:
    """The largest output size whose decode runs at DCT scale 1/``ratio`` under the
    documented rule (shorter side kept at least twice the output size), or None if
    no output size does. Derived from the rule's statement, not from the code."""
    shorter = min(height, width)
    size = -(-shorter // ratio) // 2
    if size < 1:
        return None
    if ratio < 8 and -(-shorter // (2 * ratio)) >= 2 * size:
        return None  # The next scale down would already keep the margin.
    return size
