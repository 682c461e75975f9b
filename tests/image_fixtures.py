"""Small image fixtures written at test time, one per format the job must accept.

Every image is a single solid colour, so the expected pixels after any resize and
crop are known independently of the code under test: that colour, everywhere.
"""

from __future__ import annotations

import dataclasses
import io
import os

import numpy as np
from PIL import Image

# Textured and damaged JPEGs: the ones users' tests get (etl.testing).
from etl.testing import corrupt_mid_stream, textured_jpeg


@dataclasses.dataclass(frozen=True)
class FixtureImage:
    """A fixture file: its key, expected RGB colour and whether its codec is lossy."""

    key: str
    label: str
    rgb: tuple[int, int, int]
    lossy: bool


def _solid(height: int, width: int, rgb: tuple[int, int, int]) -> np.ndarray:
    return np.broadcast_to(np.array(rgb, np.uint8), (height, width, 3)).copy()


def _encode(kind: str, height: int, width: int, rgb: tuple[int, int, int]) -> bytes:
    """Encodes a solid image as ``kind``; returns the file bytes."""
    buf = io.BytesIO()
    pixels = _solid(height, width, rgb)
    if kind == "jpeg":
        Image.fromarray(pixels).save(buf, "JPEG", quality=95)
    elif kind == "jpeg_progressive":
        Image.fromarray(pixels).save(buf, "JPEG", quality=95, progressive=True)
    elif kind == "png":
        Image.fromarray(pixels).save(buf, "PNG")
    elif kind == "png16":
        # Samples c * 257 have high byte c: the documented 16 → 8 bit reduction.
        import tensorflow as tf

        return tf.io.encode_png(pixels.astype(np.uint16) * 257).numpy()
    elif kind == "gray":
        Image.fromarray(pixels[..., 0], "L").save(buf, "PNG")
    elif kind == "rgba":
        rgba = np.concatenate([pixels, np.full((height, width, 1), 77, np.uint8)], -1)
        Image.fromarray(rgba, "RGBA").save(buf, "PNG")
    elif kind == "palette":
        Image.fromarray(pixels).convert("P", palette=Image.Palette.ADAPTIVE,
                                        colors=4).save(buf, "PNG")
    elif kind == "gif":
        # ADAPTIVE palettes hold the exact colour (the default web palette dithers).
        first = Image.fromarray(pixels).convert("P", palette=Image.Palette.ADAPTIVE)
        second = Image.fromarray(_solid(height, width, (1, 2, 3))).convert(
            "P", palette=Image.Palette.ADAPTIVE)
        first.save(buf, "GIF", save_all=True, append_images=[second])
    elif kind == "bmp":
        Image.fromarray(pixels).save(buf, "BMP")
    elif kind == "webp":
        Image.fromarray(pixels).save(buf, "WEBP", lossless=True)
    elif kind == "webp_alpha":
        # Lossless WebP with alpha 77 everywhere: the colour under it is kept exactly.
        rgba = np.concatenate([pixels, np.full((height, width, 1), 77, np.uint8)], -1)
        Image.fromarray(rgba, "RGBA").save(buf, "WEBP", lossless=True, exact=True)
    else:
        raise ValueError(kind)
    return buf.getvalue()


# (file kind, extension, height, width, lossy)
KINDS: tuple[tuple[str, str, int, int, bool], ...] = (
    ("jpeg", "jpg", 40, 56, True),
    ("jpeg_progressive", "jpeg", 64, 48, True),
    ("png", "png", 33, 20, False),
    ("png16", "png", 20, 30, False),
    ("gray", "png", 25, 25, False),
    ("rgba", "png", 18, 50, False),
    ("palette", "png", 30, 22, False),
    ("gif", "gif", 24, 36, False),
    ("bmp", "bmp", 28, 28, False),
    ("webp", "webp", 26, 34, False),
    ("webp_alpha", "webp", 21, 17, False),
)
LABELS: tuple[str, ...] = ("bird", "cat", "dog")


def colour(i: int) -> tuple[int, int, int]:
    """A distinct colour per index; gray images need r == g == b."""
    return ((37 * i + 11) % 256, (71 * i + 101) % 256, (113 * i + 29) % 256)


def write_image_folder(root: str, copies: int = 2) -> list[FixtureImage]:
    """Writes ``<root>/<label>/<kind>-<n>.<ext>`` for every label, kind and copy."""
    written = []
    i = 0
    for label in LABELS:
        os.makedirs(os.path.join(root, label), exist_ok=True)
        for n in range(copies):
            for kind, ext, height, width, lossy in KINDS:
                rgb = colour(i)
                if kind == "gray":
                    rgb = (rgb[0], rgb[0], rgb[0])
                i += 1
                key = f"{label}/{kind}-{n}.{ext}"
                with open(os.path.join(root, key), "wb") as f:
                    f.write(_encode(kind, height, width, rgb))
                written.append(FixtureImage(key=key, label=label, rgb=rgb, lossy=lossy))
    return written


def random_pixels(seed: int, height: int, width: int) -> np.ndarray:
    """``uint8 [height, width, 3]`` uniform noise: no resize or turn leaves it as is."""
    return np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8)


def exif_block(orientation: int) -> bytes:
    """An EXIF block (TIFF header and IFD0, as Pillow writes it) holding only
    ``orientation``, for ``Image.save(..., exif=...)``."""
    exif = Image.Exif()
    exif[0x0112] = orientation
    return exif.tobytes()


def exif_jpeg(pixels: np.ndarray, orientation: int | None, endian: str = ">",
              **extra_tags: object) -> bytes:
    """A JPEG written by Pillow with an EXIF block holding ``orientation`` (tag 0x0112)
    in the given TIFF byte order (">" big-endian "MM", "<" little-endian "II")."""
    exif = Image.Exif()
    exif.endian = endian
    exif[0x010F] = "Test camera"  # Make: the orientation is not the first entry.
    if orientation is not None:
        exif[0x0112] = orientation
    for tag, value in extra_tags.items():
        exif[int(tag.removeprefix("tag_"), 16)] = value
    buf = io.BytesIO()
    Image.fromarray(pixels).save(buf, "JPEG", quality=95, exif=exif)
    return buf.getvalue()


def pillow_exif_transpose(pixels: np.ndarray, orientation: int) -> np.ndarray:
    """``pixels`` turned upright for ``orientation`` by Pillow's ``exif_transpose``:
    the independent reference of the EXIF rule."""
    from PIL import ImageOps

    image = Image.fromarray(pixels)
    image.getexif()[0x0112] = orientation
    return np.asarray(ImageOps.exif_transpose(image))


def write_bad_files(root: str) -> dict[str, str]:
    """Writes broken inputs into ``<root>/dog/``; returns key → expected reason."""
    good_jpeg = _encode("jpeg", 40, 40, (10, 20, 30))
    bad = {
        "dog/truncated.jpg": good_jpeg[: len(good_jpeg) // 2],
        "dog/notes.png": b"this is not an image",
        "dog/empty.jpg": b"",
        "dog/corrupt.jpg": corrupt_mid_stream(textured_jpeg(), seed=0),
    }
    for key, data in bad.items():
        with open(os.path.join(root, key), "wb") as f:
            f.write(data)
    with open(os.path.join(root, "stray.png"), "wb") as f:  # No class folder.
        f.write(_encode("png", 8, 8, (1, 1, 1)))
    return {
        "dog/truncated.jpg": "undecodable_image",
        "dog/notes.png": "unsupported_format",
        "dog/empty.jpg": "empty_file",
        "dog/corrupt.jpg": "corrupt_image_data",
        "stray.png": "missing_label",
    }
