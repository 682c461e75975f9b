"""Reading an image file and refusing it before decoding: limits, format, header size."""

from __future__ import annotations

import dataclasses
import io
import re
import struct
import sys
import warnings

from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from etl import dead_letters, image_codec

DEFAULT_MAX_FILE_BYTES = 64 * 1024 * 1024
DEFAULT_MAX_IMAGE_PIXELS = 64 * 1024 * 1024
# Below glibc's mmap threshold (128 KiB), so reads come from the heap and a short
# read shrinks in place instead of keeping a mapping of its own.
READ_CHUNK_BYTES = 64 * 1024


@dataclasses.dataclass(frozen=True)
class InputLimits:
    """Limits that keep one hostile or broken input from exhausting a worker."""

    max_file_bytes: int = DEFAULT_MAX_FILE_BYTES
    max_image_pixels: int = DEFAULT_MAX_IMAGE_PIXELS

    def __post_init__(self) -> None:
        if self.max_file_bytes < 1 or self.max_image_pixels < 1:
            raise ValueError("--max_file_mb and --max_image_pixels must be positive.")


def read_bytes(uri: str, max_bytes: int | None = None,
               chunk_bytes: int = READ_CHUNK_BYTES) -> bytes:
    """The bytes of ``uri`` through Beam's filesystems (local, gs://, s3://, ...).

    Reads at most ``max_bytes + 1`` bytes, so an oversized file is detected without
    loading it whole. It reads in ``chunk_bytes`` pieces: ``f.read(n)`` allocates
    ``n`` bytes up front, and with ``n`` = ``--max_file_mb`` (64 MiB) every image
    cost a 64 MiB mmap and left each small image in a page-rounded mapping of its
    own (3.4x its size in resident memory; docs/RUNNING_AT_SCALE.md).

    Raises:
        OSError: if the file cannot be opened or read.
    """
    if chunk_bytes < 1:
        raise ValueError(f"chunk_bytes must be positive, got {chunk_bytes}.")
    # UNCOMPRESSED: never let a ".gz"-looking name be silently decompressed.
    with FileSystems.open(uri, compression_type=CompressionTypes.UNCOMPRESSED) as f:
        if max_bytes is None:
            return f.read()
        chunks: list[bytes] = []
        remaining = max_bytes + 1
        while remaining > 0:
            chunk = f.read(min(remaining, chunk_bytes))
            if not chunk:
                break
            chunks.append(chunk)
            remaining -= len(chunk)
        # One chunk (a file under chunk_bytes) is returned as is, without a copy.
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def declared_pixels(data: bytes) -> int | None:
    """Width × height from the image header, without decoding pixels (Pillow reads
    only the header on open); None if Pillow cannot read the header (TensorFlow's
    full decode then decides)."""
    from PIL import Image

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", Image.DecompressionBombWarning)
        try:
            with Image.open(io.BytesIO(data)) as image:
                width, height = image.size
        except Image.DecompressionBombError as e:
            # Pillow refuses > 2x its own limit at open: the size is in the message.
            sizes = [int(n) for n in re.findall(r"\d+", str(e))]
            return sizes[0] if sizes else sys.maxsize
        except (OSError, SyntaxError, ValueError, EOFError, struct.error):
            return None  # A header Pillow cannot parse: TensorFlow's decode decides.
    return width * height


def tf_error_detail(message: str) -> str:
    """The human part of a TensorFlow error message, without run-specific node and
    function names (they embed counters, which would make dead letters differ
    between otherwise identical runs)."""
    message = re.sub(r"\{\{[^}]*\}\}|\[\[[^\]]*\]\]|\[Op:[^\]]*\].*", " ", message)
    return " ".join(message.split())[:300]


def validate_image_bytes(data: bytes, limits: InputLimits = InputLimits()
                         ) -> tuple[str, str] | None:
    """``(reason, message)`` if ``data`` is refused before decoding, else None.

    Checks, cheapest first: size, container format, and the header's pixel count
    (a decompression bomb is refused before any decoding). Nothing is decoded here:
    the one decode of an accepted image is the transform's own, and an image it
    cannot decode becomes an ``undecodable_image`` dead letter there
    (``etl.image_shards.transform_batch``).
    """
    if not data:
        return dead_letters.EMPTY_FILE, "File is empty (0 bytes)."
    if len(data) > limits.max_file_bytes:
        return (dead_letters.FILE_TOO_LARGE,
                f"File exceeds --max_file_mb ({limits.max_file_bytes} bytes).")
    if image_codec.sniff_format(data) is None:
        # Says what is wrong without quoting the file: dead letters are shared, and
        # the file may be anything the job was pointed at.
        return (dead_letters.UNSUPPORTED_FORMAT,
                "No known image signature: not a JPEG, PNG, GIF, BMP or WebP file.")
    pixels = declared_pixels(data)
    if pixels is not None and pixels > limits.max_image_pixels:
        message = (f"Header declares {pixels} pixels, above --max_image_pixels "
                   f"({limits.max_image_pixels}); not decoded.")
        return dead_letters.IMAGE_TOO_LARGE, message
    return None
