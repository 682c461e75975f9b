"""An image's three duplicate signatures, taken from the pixels of its one decode.

* ``bytes_sha256``: SHA-256 of the file's bytes (a copy, whatever its name).
* ``pixels_xxh128``: XXH3-128 of the upright RGB pixels as the job decodes them, with
  their shape (a re-save with other compression or metadata). The job decodes a
  large JPEG at the DCT scale its output size needs (``codec.jpeg_decode_ratio``):
  those are the pixels hashed, so two JPEGs of the same size compare at the same
  scale; every other image is hashed at full size. Not SHA-256: it runs at 1.2 GB/s
  on the benchmark machine, 0.87 ms for a web photo's megabyte of pixels, about a
  fifth of the job's whole cost per photo; XXH3 takes 0.06 ms, and 128 bits make a
  chance collision in a billion images about 1e-21.
* ``phash``: the 64-bit perceptual hash of the upright image as the dataset stores
  it (resized, EXIF-turned and centre-cropped, before a lossy encode: the pixels both
  decode paths meet in), for re-encodes and resizes. The standard DCT recipe of
  ``imagehash.phash`` on a 32x32 grayscale thumbnail (``codec.thumbnails``, in
  the shard step's graph: an area average, then ITU-R 601 luma, where imagehash
  resizes with Lanczos at several times the cost), 2-D DCT-II, the 8x8 lowest
  frequencies against their median. The DCT is done in integers, so the bits are
  the same on every machine; ``blank`` marks an image whose thumbnail has no
  contrast (its hash says nothing about it).

"Upright" is the EXIF orientation the job applies (none with
``--ignore_exif_orientation``). TensorFlow-free: the shard step calls these on
NumPy arrays, on its transform threads (hashlib and xxhash release the GIL).
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Sequence
from typing import Any

import numpy as np
import xxhash

# The perceptual hash: HASH_SIZE x HASH_SIZE low frequencies of a THUMBNAIL_SIZE
# square thumbnail (imagehash's hash_size=8, highfreq_factor=4).
HASH_SIZE = 8
THUMBNAIL_SIZE = 32
HASH_BITS = HASH_SIZE * HASH_SIZE
# A thumbnail whose levels span at most this many is blank: flat colour, no picture.
BLANK_CONTRAST = 2
# DCT-II coefficients (scipy's unnormalised 2 cos(pi k (2n + 1) / 2N)) in fixed point:
# the 8x8 block of a uint8 thumbnail is then exact in int64 (< 2^61), so its bits
# never depend on a machine's floating point.
_DCT_SCALE_BITS = 20
_DCT = np.round(2.0 * np.cos(
    np.pi * np.arange(HASH_SIZE)[:, None] * (2 * np.arange(THUMBNAIL_SIZE)[None, :] + 1)
    / (2 * THUMBNAIL_SIZE)) * (1 << _DCT_SCALE_BITS)).astype(np.int64)


@dataclasses.dataclass(frozen=True)
class ImageHashes:
    """The signatures of one decoded image (see the module docstring)."""

    bytes_sha256: str
    pixels_xxh128: str
    phash: int
    blank: bool

    def to_dict(self) -> dict[str, Any]:
        """JSON fields; the hash as 16 hex digits, as ``str(imagehash.phash(...))``."""
        return {"bytes_sha256": self.bytes_sha256, "pixels_xxh128": self.pixels_xxh128,
                "phash": f"{self.phash:016x}", "blank": self.blank}

    @classmethod
    def from_dict(cls, fields: dict[str, Any]) -> ImageHashes:
        return cls(fields["bytes_sha256"], fields["pixels_xxh128"],
                   int(fields["phash"], 16), bool(fields["blank"]))


def upright(pixels: np.ndarray, orientation: int) -> np.ndarray:
    """``[h, w, c]`` stored pixels turned upright for an EXIF orientation, as
    ``etl.images.exif.apply_orientation`` does in the graph (a view, no copy)."""
    if orientation not in range(2, 9):
        return pixels
    turned = pixels.transpose(1, 0, 2) if orientation >= 5 else pixels
    if orientation in (3, 4, 7, 8):
        turned = turned[::-1]
    if orientation in (2, 3, 6, 7):
        turned = turned[:, ::-1]
    return turned


def pixels_xxh128(pixels: np.ndarray) -> str:
    """XXH3-128 of ``uint8 [h, w, 3]`` pixels, row-major, after a ``"h w 3\n"`` header
    (the same bytes in another shape are another image)."""
    if pixels.dtype != np.uint8 or pixels.ndim != 3:
        raise ValueError(f"Expected uint8 [height, width, channels] pixels, got "
                         f"{pixels.dtype} {pixels.shape}.")
    digest = xxhash.xxh3_128(" ".join(map(str, pixels.shape)).encode() + b"\n")
    digest.update(_row_major(pixels).data)
    return digest.hexdigest()


def _row_major(pixels: np.ndarray) -> np.ndarray:
    """``uint8 [h, w, c]`` pixels in one row-major block: ``pixels`` itself if it is
    one, else a copy. A turned view (``upright``) is copied a whole pixel at a time,
    as one ``c``-byte item: NumPy copies a strided ``uint8`` view byte by byte, 4.1
    ms for a 12 MP photo at its 1/4 decode scale against 1.7 ms (*measured once*)."""
    if pixels.flags.c_contiguous:
        return pixels
    if pixels.strides[2] != 1:  # Its pixels' bytes are not side by side.
        return np.ascontiguousarray(pixels)
    whole = pixels.view(np.dtype((np.void, pixels.shape[2])))  # [h, w, 1]
    return np.ascontiguousarray(whole).view(np.uint8)


def perceptual_hashes(thumbnails: np.ndarray) -> list[tuple[int, bool]]:
    """``(phash, blank)`` of each ``uint8 [32, 32]`` grayscale thumbnail of
    ``[n, 32, 32]``: the bits of its 8x8 lowest DCT frequencies above their median,
    row-major, first bit highest (``imagehash``'s hex string, read as an integer). A
    batch at a time: per image, NumPy's calls cost more than their arithmetic."""
    if thumbnails.ndim != 3 or thumbnails.shape[1:] != (THUMBNAIL_SIZE, THUMBNAIL_SIZE):
        raise ValueError(f"Expected [n, {THUMBNAIL_SIZE}, {THUMBNAIL_SIZE}] thumbnails, got "
                         f"{thumbnails.shape}.")
    small = thumbnails.astype(np.int64)
    low = (_DCT @ small @ _DCT.T).reshape(len(small), HASH_BITS)
    ordered = np.sort(low, axis=1)
    middle = HASH_BITS // 2
    # value > median, with the median (a + b) / 2 of the two middle values kept exact.
    bits = 2 * low > (ordered[:, middle - 1] + ordered[:, middle])[:, None]
    hashes = np.packbits(bits, axis=1).view(">u8").reshape(-1).tolist()
    contrast = (small.max(axis=(1, 2)) - small.min(axis=(1, 2))).tolist()
    return [(phash, spread <= BLANK_CONTRAST)
            for phash, spread in zip(hashes, contrast, strict=True)]


def batch_hashes(data: Sequence[bytes], decoded: Sequence[np.ndarray],
                 orientations: Sequence[int], thumbnails: np.ndarray) -> list[ImageHashes]:
    """The signatures of each file of ``data``, decoded to ``uint8 [h, w, 3]`` pixels
    as stored (``decoded``, turned upright by its EXIF orientation for their hash),
    with the grayscale thumbnails ``[n, 32, 32]`` of their stored images
    (``codec.thumbnails``)."""
    phashes = perceptual_hashes(thumbnails)
    return [ImageHashes(hashlib.sha256(file).hexdigest(),
                        pixels_xxh128(upright(pixels, orientation)), phash, blank)
            for file, pixels, orientation, (phash, blank) in zip(
                data, decoded, orientations, phashes, strict=True)]
