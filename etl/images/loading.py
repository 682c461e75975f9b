"""Reading an image file and checking it: limits, format, header size, and (strict
decoding) compressed data a decoder reports damaged. A JPEG's strict decode is also
the one decode the job uses (:func:`plan_jpeg_decode`, :func:`decode_jpeg_into`)."""

from __future__ import annotations

import dataclasses
import io
import re
import struct
import sys
import warnings

import numpy as np

from etl.core import dead_letters
from etl.images import codec

DEFAULT_MAX_FILE_BYTES = 64 * 1024 * 1024
DEFAULT_MAX_IMAGE_PIXELS = 64 * 1024 * 1024
# --decode_budget_mb's default: a 4-channel image at the default --max_image_pixels
# weighs 0.90-0.96 GiB (decode_weight), so it is decoded alone, never refused.
DEFAULT_DECODE_BUDGET_BYTES = 1024 * 1024 * 1024


@dataclasses.dataclass(frozen=True)
class InputLimits:
    """Limits that keep one hostile or broken input from exhausting a worker, and
    whether damaged image data is refused (``strict_decoding``, see
    :func:`corrupt_data_problem`) or stored as TensorFlow decodes it.
    ``decode_budget_bytes`` bounds what the images a process decodes at once weigh
    (:func:`decode_weight`, ``etl.images.shards.process_shard``)."""

    max_file_bytes: int = DEFAULT_MAX_FILE_BYTES
    max_image_pixels: int = DEFAULT_MAX_IMAGE_PIXELS
    strict_decoding: bool = True
    decode_budget_bytes: int = DEFAULT_DECODE_BUDGET_BYTES

    def __post_init__(self) -> None:
        if self.max_file_bytes < 1 or self.max_image_pixels < 1:
            raise ValueError("--max_file_mb and --max_image_pixels must be positive.")
        if self.decode_budget_bytes < 1:
            raise ValueError(f"--decode_budget_mb must be positive, got "
                             f"{self.decode_budget_bytes / 2**20:g} MiB.")


@dataclasses.dataclass(frozen=True)
class ImageHeader:
    """What an image's header declares: width × height, and Pillow's name for how
    its pixels are stored (``RGB``, ``L``, ``RGBA``, ``P``, ``CMYK``, ...; empty for
    a header Pillow refused as a decompression bomb); ``size`` is ``(width,
    height)`` (None for such a header: its message gives only the pixel count)."""

    pixels: int
    mode: str
    size: tuple[int, int] | None = None


def read_header(data: bytes) -> ImageHeader | None:
    """The image header, without decoding pixels (Pillow reads only the header on
    open); None if Pillow cannot read the header (TensorFlow's full decode then
    decides)."""
    from PIL import Image

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", Image.DecompressionBombWarning)
        try:
            with Image.open(io.BytesIO(data)) as image:
                width, height = image.size
                mode = image.mode
        except Image.DecompressionBombError as e:
            return ImageHeader(_refused_pixels(e), "")
        except (OSError, SyntaxError, ValueError, EOFError, struct.error):
            return None  # A header Pillow cannot parse: TensorFlow's decode decides.
    return ImageHeader(width * height, mode, (width, height))


# The two decoders below report some problems only in words: these two functions
# are the only places their messages are read.

def _refused_pixels(error: Exception) -> int:
    """The pixel count of an image Pillow refuses to open (above twice its own
    ``Image.MAX_IMAGE_PIXELS``): its ``DecompressionBombError`` carries the size only
    in its message, "Image size (N pixels) exceeds limit of ...". Unreadable, the
    count is taken to be above every limit."""
    sizes = [int(n) for n in re.findall(r"\d+", str(error))]
    return sizes[0] if sizes else sys.maxsize


def _libjpeg_truncated(warning: str) -> bool:
    """True if libjpeg's ``warning`` says the data ends before the image does
    (JWRN_JPEG_EOF: a truncated file, which TensorFlow refuses outright). simplejpeg
    raises every libjpeg warning as a ``ValueError`` holding libjpeg's text, with no
    code, so the warning is known by its text."""
    return warning.startswith("Premature end of JPEG file")


def _jpeg_problem(data: bytes) -> tuple[str, str] | None:
    import simplejpeg

    try:
        # min_height/min_width of 1 pick libjpeg-turbo's smallest scale (1/8): the
        # entropy decoder, where damage shows, still reads every bit of every scan,
        # at a fraction of a full decode's cost. strict=True turns libjpeg's
        # warnings ("Corrupt JPEG data: ...") into errors. The GIL is released
        # while it decodes.
        simplejpeg.decode_jpeg(data, min_height=1, min_width=1, strict=True)
        return None
    except ValueError as e:
        warning = str(e)
    if _libjpeg_truncated(warning):
        return (dead_letters.UNDECODABLE_IMAGE,
                f"JPEG data ends before the image does (truncated): libjpeg: {warning}")
    try:
        simplejpeg.decode_jpeg(data, min_height=1, min_width=1, strict=False)
    except ValueError:
        # Not a warning but an error libjpeg cannot decode past: the transform's own
        # decode decides (undecodable_image, or TensorFlow reads what libjpeg-turbo's
        # TurboJPEG interface does not).
        return None
    return dead_letters.CORRUPT_IMAGE_DATA, f"libjpeg reports damaged JPEG data: {warning}"


def _gif_problem(data: bytes) -> tuple[str, str] | None:
    from PIL import Image

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", Image.DecompressionBombWarning)
        try:
            with Image.open(io.BytesIO(data)) as image:
                image.load()  # Decodes the first frame, the one the job stores.
        except Image.DecompressionBombError:
            return None  # Above Pillow's own limit, not damage: --max_image_pixels rules.
        except (OSError, SyntaxError, ValueError, EOFError, struct.error) as e:
            detail = " ".join(str(e).split())[:200]
            return (dead_letters.CORRUPT_IMAGE_DATA,
                    f"Pillow reports damaged GIF data: {detail}")
    return None


def corrupt_data_problem(data: bytes, image_format: str) -> tuple[str, str] | None:
    """``(reason, message)`` if a strict decoder finds ``data``'s image data damaged.

    TensorFlow decodes some damaged files without an error, to broken pixels. Where
    a maintained decoder reports that damage, it is asked first:

    * JPEG: libjpeg-turbo (simplejpeg, strict, at 1/8 scale). A file it decodes
      only with warnings (e.g. "Corrupt JPEG data: 24 extraneous bytes before marker
      0xd9" after entropy-coded data was overwritten) is ``corrupt_image_data``; one
      that ends early is ``undecodable_image``, the code TensorFlow's decode gives
      truncated files. Damage that leaves the Huffman stream in step goes unseen.
    * GIF: Pillow's decoder of the first frame, which reports LZW damage that
      TensorFlow's GIF decoder passes over.
    * PNG, WebP, BMP: nothing here. TensorFlow's PNG decoder already refuses damage
      (CRC and zlib checks); WebP's decoder (libwebp, in TensorFlow as in Pillow)
      refuses what it detects, and lossless WebP and BMP carry no check that could
      show damage. Those refusals happen in the transform (``undecodable_image``).
    """
    if image_format == "jpeg":
        return _jpeg_problem(data)
    if image_format == "gif":
        return _gif_problem(data)
    return None


# What a graph traced in this process adds to its errors: where each node was
# defined, Python stack and all (paths and line numbers of this machine).
_GRAPH_ERROR_PREAMBLE = re.compile(
    r"Graph execution error:|Detected at node .*? defined at \(most recent call last\):"
    r"|^\s*File \".*$", re.MULTILINE)


def tf_error_detail(message: str) -> str:
    """The human part of a TensorFlow error message, without run-specific node and
    function names (they embed counters, which would make dead letters differ
    between otherwise identical runs) and without where the failing node was defined
    (a Python stack, which names this machine's files)."""
    message = _GRAPH_ERROR_PREAMBLE.sub(" ", message)
    message = re.sub(r"\{\{[^}]*\}\}|\[\[[^\]]*\]\]|\[Op:[^\]]*\].*", " ", message)
    return " ".join(message.split())[:300]


# JPEG layouts (colour space, chroma subsampling as simplejpeg names them) on which
# libjpeg-turbo's TurboJPEG interface (simplejpeg) and TensorFlow's decode_jpeg, both
# with the accurate IDCT and fancy upsampling, give the same pixels at every DCT
# scale: tests/etl/images/test_jpeg_agreement.py decodes a corpus of each (baseline and
# progressive, restart markers, odd sizes, every EXIF orientation) with both.
# Other layouts (CMYK, YCCK, 4:4:0, 4:1:1, ...) are decoded by the transform itself.
AGREEING_JPEG_LAYOUTS = frozenset({
    ("YCbCr", "444"), ("YCbCr", "422"), ("YCbCr", "420"), ("Gray", "Gray")})


@dataclasses.dataclass(frozen=True)
class JpegDecode:
    """How the job decodes a JPEG itself: libjpeg-turbo at DCT scale ``1 / ratio``,
    giving ``uint8 [height, width, 3]``, exactly what ``etl.images.codec.decode_rgb``
    gives for the same file and output size (:data:`AGREEING_JPEG_LAYOUTS`), from a
    ``source_height × source_width`` JPEG."""

    ratio: int
    height: int
    width: int
    source_height: int
    source_width: int

    @property
    def nbytes(self) -> int:
        return self.height * self.width * 3


@dataclasses.dataclass(frozen=True)
class Checked:
    """An image that passed the checks made before decoding. ``jpeg`` is set for a
    JPEG the job decodes itself (:func:`decode_jpeg_into`, whose strict decode is
    also its damage check); None when the transform decodes the image. ``header``
    is what its header declares (None where Pillow cannot read it); ``weight``, its
    :func:`decode_weight`."""

    jpeg: JpegDecode | None = None
    header: ImageHeader | None = None
    weight: int = 0


# Bytes a decode holds per decoded pixel: max(channels, 3) + this (measured in
# docs/BENCHMARKS.md, "Image decode memory"). TensorFlow's decode (a tf.map_fn per
# batch, FinishImages.decode) writes 8 bits a channel (libpng cuts a 16-bit PNG as it
# reads), an RGB copy, map_fn's element and result, and a batch mixing those with the
# job's JPEGs copies all once more: 6.3-9.5 bytes a pixel measured alone, 10.5 two at
# once. A JPEG the job decodes is weighed as the transform's decode, its fallback.
DECODE_BYTES_PER_PIXEL = 10
# More for alpha composited on --alpha_background, in int32 (38-44 measured in all).
COMPOSITE_BYTES_PER_PIXEL = 36
# The resize's float32 RGB: its intermediate, the resized image and two copies.
FLOAT_RGB_BYTES = 12
# TensorFlow's channels for Pillow's modes (a palette may carry transparency: RGBA).
_CHANNELS = {"1": 1, "L": 1, "I": 1, "F": 1, "LA": 2, "La": 2, "RGB": 3, "YCbCr": 3, "HSV": 3}


def decode_weight(data: bytes, header: ImageHeader | None, image_size: int | None = None,
                  composite_alpha: bool = False,
                  max_image_pixels: int = DEFAULT_MAX_IMAGE_PIXELS) -> int:
    """Bytes an image holds at its decode's peak, its file included: what the shard
    step's batches and its budget (``InputLimits.decode_budget_bytes``) weigh.

    Its decoded pixels (a JPEG's at the DCT scale for ``image_size``) times
    ``max(channels, 3) + DECODE_BYTES_PER_PIXEL`` (+ ``COMPOSITE_BYTES_PER_PIXEL``
    with alpha and ``composite_alpha``), and with ``image_size`` the resize's float32
    copies, which grow with the output's longer side. An unreadable header is
    weighed as a 4-channel square image of ``max_image_pixels``."""
    side = max(1, int((header.pixels if header else max_image_pixels) ** 0.5))
    width, height = header.size if header and header.size else (side, side)
    mode = header.mode if header else ""
    channels = 1 if mode.startswith("I;16") else _CHANNELS.get(mode, 4)
    ratio = (codec.jpeg_decode_ratio(height, width, image_size)
             if image_size and codec.sniff_format(data) == "jpeg" else 1)
    decoded_height, decoded_width = -(-height // ratio), -(-width // ratio)
    per_pixel = max(channels, 3) + DECODE_BYTES_PER_PIXEL + (
        COMPOSITE_BYTES_PER_PIXEL if composite_alpha and channels % 2 == 0 else 0)
    weight = len(data) + decoded_height * decoded_width * per_pixel
    if image_size:  # codec.resize_upright's sizes: the shorter side becomes image_size
        shorter = max(1, min(height, width))
        new_height = max(image_size, (height * image_size + shorter // 2) // shorter)
        new_width = max(image_size, (width * image_size + shorter // 2) // shorter)
        weight += FLOAT_RGB_BYTES * (3 * new_height * new_width + max(
            new_height * decoded_width, decoded_height * new_width))
    return weight


# Decoded pixels are handed to TensorFlow through DLPack, buffer and all
# (etl.images.batches.FinishImages); its CPU kernels expect data aligned as its own
# allocator aligns it (EIGEN_MAX_ALIGN_BYTES).
TENSOR_ALIGNMENT = 64


def aligned_buffer(nbytes: int) -> np.ndarray:
    """An uninitialised ``uint8 [nbytes]`` array whose data is ``TENSOR_ALIGNMENT``-aligned."""
    raw = np.empty(nbytes + TENSOR_ALIGNMENT, np.uint8)
    offset = -raw.ctypes.data % TENSOR_ALIGNMENT
    return raw[offset:offset + nbytes]


def plan_jpeg_decode(data: bytes, image_size: int) -> JpegDecode | None:
    """The decode of a JPEG for ``image_size`` px output, from its header: at the DCT
    scale ``etl.images.codec.jpeg_decode_ratio`` picks, for a layout in
    :data:`AGREEING_JPEG_LAYOUTS`; None for any other layout or an unreadable header
    (the transform decodes those)."""
    import simplejpeg

    try:
        height, width, colorspace, subsampling = simplejpeg.decode_jpeg_header(data)
    except ValueError:
        return None
    if (colorspace, subsampling) not in AGREEING_JPEG_LAYOUTS:
        return None
    ratio = codec.jpeg_decode_ratio(height, width, image_size)
    return JpegDecode(ratio, -(-height // ratio), -(-width // ratio), height, width)


def decode_jpeg_into(data: bytes, plan: JpegDecode, out: np.ndarray, strict: bool
                     ) -> np.ndarray | tuple[str, str] | None:
    """Decodes ``data`` as ``plan`` says into ``out`` (``plan.nbytes`` aligned bytes):
    the pixels, viewed ``[height, width, 3]``.

    libjpeg-turbo's warnings are errors. A decode that warns is refused with
    ``strict`` (``(reason, message)``: ``corrupt_image_data``, or
    ``undecodable_image`` when the data ends early) and, without it or when libjpeg
    cannot decode the file at all, left to the transform's own decode (None).
    """
    import simplejpeg

    try:
        # simplejpeg picks the smallest libjpeg scale giving at least min_height x
        # min_width: no scale below 1/ratio reaches ceil(side / ratio) on both sides.
        pixels = simplejpeg.decode_jpeg(data, colorspace="RGB", min_height=plan.height,
                                        min_width=plan.width, min_factor=plan.ratio,
                                        buffer=out, strict=True)
    except ValueError:
        return _jpeg_problem(data) if strict else None
    if pixels.shape != (plan.height, plan.width, 3):
        return None  # Not the transform's scale: let it decode.
    return pixels


def check_image(data: bytes, limits: InputLimits = InputLimits(),
                image_size: int | None = None, composite_alpha: bool = False
                ) -> Checked | tuple[str, str]:
    """``(reason, message)`` if ``data`` is refused before it is decoded, else
    :class:`Checked`.

    Checks, cheapest first: size, container format, the header's pixel count (a
    decompression bomb is refused before any decoding), its :func:`decode_weight`
    (above ``limits.decode_budget_bytes``: refused; an unreadable header weighs at
    most the budget: decoded alone) and damaged image data. Given
    the ``image_size`` the transform resizes to, a JPEG in an agreeing layout is
    planned for the job's own decode (``Checked(jpeg=...)``), whose strictness is
    its damage check (:func:`decode_jpeg_into`). Other images are checked here, with
    ``limits.strict_decoding``, by :func:`corrupt_data_problem` and decoded by the
    transform, where an image it cannot decode becomes an ``undecodable_image``
    dead letter (``etl.images.shards.transform_batch``).
    """
    if not data:
        return dead_letters.EMPTY_FILE, "File is empty (0 bytes)."
    if len(data) > limits.max_file_bytes:
        return (dead_letters.FILE_TOO_LARGE,
                f"File exceeds --max_file_mb ({limits.max_file_bytes} bytes).")
    image_format = codec.sniff_format(data)
    if image_format is None:
        # Says what is wrong without quoting the file: dead letters are shared, and
        # the file may be anything the job was pointed at.
        return (dead_letters.UNSUPPORTED_FORMAT,
                "No known image signature: not a JPEG, PNG, GIF, BMP or WebP file.")
    header = read_header(data)
    if header is not None and header.pixels > limits.max_image_pixels:
        message = (f"Header declares {header.pixels} pixels, above --max_image_pixels "
                   f"({limits.max_image_pixels}); not decoded.")
        return dead_letters.IMAGE_TOO_LARGE, message
    weight = decode_weight(data, header, image_size, composite_alpha, limits.max_image_pixels)
    if header is None:
        weight = min(weight, limits.decode_budget_bytes)
    elif weight > limits.decode_budget_bytes:
        shape = "{} x {} ".format(*header.size) if header.size else ""
        return dead_letters.IMAGE_TOO_LARGE, (
            f"Decoding it ({shape}{header.mode or 'image'}) would hold about "
            f"{weight / 2**20:.0f} MiB at once, above --decode_budget_mb "
            f"({limits.decode_budget_bytes / 2**20:g}); not decoded.")
    if image_format == "jpeg" and image_size is not None:
        plan = plan_jpeg_decode(data, image_size)
        if plan is not None:
            return Checked(jpeg=plan, header=header, weight=weight)
    if limits.strict_decoding:
        problem = corrupt_data_problem(data, image_format)
        if problem is not None:
            return problem
    return Checked(header=header, weight=weight)
