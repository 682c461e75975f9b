"""Image decode → RGB → resize → upright (EXIF) → centre-crop → encode, as pure
TensorFlow ops.

They run inside ``preprocessing_fn`` (in the exported ``transform_fn``), so serving
applies byte-for-byte the preprocessing that produced the stored examples, and in
the shard plan's size sample. The reader decodes stored images with
``reader.tfdata.decoding.decode_stored_image``.
"""

from __future__ import annotations

import tensorflow as tf

from etl.images import exif
from etl.images.quality import QUALITY_THUMBNAIL_SIZE, sharpness_side
from reader.format.contract import IMAGE_FORMATS, JPEG, PNG, RAW

# Leading bytes of the containers tf.io.decode_image understands.
_MAGIC: tuple[tuple[bytes, str], ...] = (
    (b"\xff\xd8\xff", "jpeg"),
    (b"\x89PNG\r\n\x1a\n", "png"),
    (b"GIF87a", "gif"),
    (b"GIF89a", "gif"),
    (b"BM", "bmp"),
)

# JPEG decoding: libjpeg's accurate integer IDCT (TensorFlow's default is the fast
# one, whose output differs by up to 5 levels and which libjpeg-turbo's TurboJPEG
# interface, the job's decoder, does not use), at a DCT scale of 1/ratio.
JPEG_DCT_METHOD = "INTEGER_ACCURATE"
JPEG_DECODE_RATIOS = (1, 2, 4, 8)
# A JPEG is decoded at the smallest scale that keeps its shorter side at least this
# many times the output size; the antialiased resize does the rest. 2 is Pillow's
# reducing_gap and libvips' shrink-on-load rule (docs/BENCHMARKS.md has the measured
# pixel error of each choice).
JPEG_SCALE_MARGIN = 2

# Single-byte strings 0..255, used to lay uint8 pixels out as a raw byte string.
_BYTE_TABLE = [bytes([i]) for i in range(256)]


def sniff_format(data: bytes) -> str | None:
    """Container format from the file's leading bytes, or None if not an image we read.

    Recognises JPEG, PNG, GIF, BMP and WebP (the formats ``tf.io.decode_image``
    decodes). The file extension is deliberately ignored: it is often wrong.
    """
    for magic, name in _MAGIC:
        if data.startswith(magic):
            return name
    if len(data) >= 12 and data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "webp"
    return None


def jpeg_decode_ratio(height: int, width: int, image_size: int,
                      margin: float = JPEG_SCALE_MARGIN) -> int:
    """The libjpeg scale denominator (1, 2, 4 or 8) a ``height × width`` JPEG is
    decoded at for ``image_size`` px output: the largest whose decoded shorter side,
    ``ceil(shorter / ratio)``, is still at least ``margin × image_size`` (the job's
    rule: ``JPEG_SCALE_MARGIN``; others only to measure them).

    :func:`decode_rgb` applies the same rule with TensorFlow ops inside the graph;
    this is its plain-integer twin for the job's own decode
    (``etl.images.loading``). A test checks that the two agree.
    """
    shorter = min(height, width)
    for ratio in JPEG_DECODE_RATIOS[::-1]:
        if -(-shorter // ratio) >= margin * image_size:
            return ratio
    return 1


def _decode_jpeg(image_bytes: tf.Tensor, image_size: int | None) -> tf.Tensor:
    """A JPEG at the DCT scale of :func:`jpeg_decode_ratio` (full size without
    ``image_size``), with libjpeg's accurate integer IDCT."""
    branches = [
        lambda ratio=ratio: tf.io.decode_jpeg(image_bytes, channels=0, ratio=ratio,
                                              dct_method=JPEG_DCT_METHOD)
        for ratio in JPEG_DECODE_RATIOS]
    if image_size is None:
        return branches[0]()
    index = _jpeg_ratio_index(tf.image.extract_jpeg_shape(image_bytes), image_size)
    image = tf.switch_case(index, branches)
    image.set_shape([None, None, None])
    return image


def _jpeg_ratio_index(shape: tf.Tensor, image_size: int) -> tf.Tensor:
    """Index in ``JPEG_DECODE_RATIOS`` of :func:`jpeg_decode_ratio` for a JPEG of
    header ``shape`` (``tf.image.extract_jpeg_shape``)."""
    shorter = tf.minimum(shape[0], shape[1])
    # ceil(shorter / ratio) falls as the ratio grows, so the number of ratios above 1
    # that keep the margin is the index of the largest one that does.
    return tf.add_n([tf.cast((shorter + ratio - 1) // ratio >= JPEG_SCALE_MARGIN
                             * image_size, tf.int32) for ratio in JPEG_DECODE_RATIOS[1:]])


def source_geometry(image_bytes: tf.Tensor, image: tf.Tensor,
                    image_size: int | None) -> tuple[tf.Tensor, tf.Tensor]:
    """``(source (height, width), ratio)`` of an image :func:`decode_rgb` decoded for
    ``image_size``: a JPEG's size in its header and its DCT scale denominator, else
    the decoded size and 1. :func:`resize_and_center_crop` sizes and scales from
    these, so a reduced-scale decode is resized onto exactly the grid a full-size
    one would be."""
    decoded = tf.shape(image)[:2]
    if image_size is None:
        return decoded, tf.constant(1, tf.int32)
    def jpeg() -> tuple[tf.Tensor, tf.Tensor]:
        shape = tf.image.extract_jpeg_shape(image_bytes)
        return shape[:2], tf.gather(JPEG_DECODE_RATIOS, _jpeg_ratio_index(shape, image_size))

    is_jpeg = tf.equal(tf.strings.substr(image_bytes, 0, 3), _MAGIC[0][0])
    return tf.cond(is_jpeg, jpeg, lambda: (decoded, tf.constant(1, tf.int32)))


def decode_rgb(image_bytes: tf.Tensor, *,
               alpha_background: tuple[int, int, int] | None = None,
               image_size: int | None = None) -> tf.Tensor:
    """Decodes one encoded image to ``uint8 [height, width, 3]``.

    A JPEG is decoded by libjpeg with its accurate integer IDCT
    (``JPEG_DCT_METHOD``) and, given the ``image_size`` it will be resized to, at the
    DCT scale of :func:`jpeg_decode_ratio` (1/2, 1/4 or 1/8 of each side while the
    shorter side stays at least twice ``image_size``): the entropy decoding is
    the same, but the inverse DCT, colour conversion and the resize that follows
    work on up to 64 times fewer pixels. Other formats decode at full size.

    Normalisation rules (documented in docs/FORMAT.md): grayscale is replicated to
    three channels; palette images are expanded; 16-bit PNG keeps the high byte of
    each sample; GIF keeps its first frame. An alpha channel (RGBA or gray + alpha
    PNG, palette PNG with transparency, 32-bit BMP, WebP with alpha) is dropped
    unless ``alpha_background`` is given, in which case the image is composited on
    that colour: ``round((c * a + bg * (255 - a)) / 255)`` per channel, in integer
    arithmetic (the quotient is never a tie). TensorFlow's GIF decoder returns no
    alpha (transparent GIF pixels are black), so GIFs are never composited. EXIF
    orientation is not applied here (see :func:`finish`).

    Raises:
        tf.errors.InvalidArgumentError: for bytes that are not a decodable image.
    """
    is_jpeg = tf.equal(tf.strings.substr(image_bytes, 0, 3), _MAGIC[0][0])
    # channels=0 decodes what the file holds (1 to 4 channels): asking for 3 fails
    # outright on a WebP with alpha, and 4 fails on JPEG and GIF.
    image = tf.cond(is_jpeg, lambda: _decode_jpeg(image_bytes, image_size),
                    lambda: tf.io.decode_image(image_bytes, channels=0, dtype=tf.uint8,
                                               expand_animations=False))
    image.set_shape([None, None, None])
    channels = tf.shape(image)[2]
    rgb = tf.cond(channels >= 3, lambda: image[:, :, :3],
                  lambda: tf.tile(image[:, :, :1], [1, 1, 3]))
    rgb.set_shape([None, None, 3])
    if alpha_background is None:
        return rgb
    background = tf.constant(alpha_background, tf.int32)

    def composite() -> tf.Tensor:
        alpha = tf.cast(image[:, :, -1:], tf.int32)
        mixed = tf.cast(rgb, tf.int32) * alpha + background * (255 - alpha)
        return tf.cast((mixed + 127) // 255, tf.uint8)

    # Gray + alpha has 2 channels, RGBA 4: only those carry an alpha channel.
    composited = tf.cond(tf.equal(channels % 2, 0), composite, lambda: rgb)
    composited.set_shape([None, None, 3])
    return composited


def resize_and_center_crop(image: tf.Tensor, size: int,
                           orientation: tf.Tensor | None = None, *,
                           source_shape: tf.Tensor | None = None,
                           ratio: tf.Tensor | int = 1) -> tf.Tensor:
    """Resizes the shorter side to ``size`` and crops the centre ``size × size``:
    :func:`center_crop` of :func:`resize_upright`."""
    return center_crop(resize_upright(image, size, orientation, source_shape=source_shape,
                                      ratio=ratio), size)


def resize_upright(image: tf.Tensor, size: int, orientation: tf.Tensor | None = None, *,
                   source_shape: tf.Tensor | None = None,
                   ratio: tf.Tensor | int = 1) -> tf.Tensor:
    """Resizes the shorter side to ``size``, turned upright: ``float32 [h', w', 3]``,
    not yet rounded.

    The scaled longer side is ``round(long * size / short)`` in integer arithmetic;
    resampling is bilinear with antialiasing (``tf.image.resize(..., antialias=True)``'s
    kernel, which behaves like area averaging when shrinking).

    ``source_shape`` and ``ratio`` describe a reduced-scale decode (``image`` is
    ``ceil(source / ratio)`` per side, :func:`source_geometry`): the scaled sizes
    come from the source and each decoded pixel spans ``ratio`` source pixels, so the
    result lies on the grid a full-size decode's would. Without them (or with ratio
    1) this is exactly ``tf.image.resize``.

    With an EXIF ``orientation``, the resized image is turned upright
    (``etl.images.exif.apply_orientation``). The resize is separable and
    symmetric, so this equals turning the decoded image first up to float rounding
    (at most 1 level, on about 0.01 % of the values of photos), and it moves
    ``size``-sized pixels instead of a photo's.
    """
    if source_shape is None:
        source_shape = tf.shape(image)[:2]
    height, width = source_shape[0], source_shape[1]
    shorter = tf.minimum(height, width)
    new_height = tf.maximum(size, (height * size + shorter // 2) // shorter)
    new_width = tf.maximum(size, (width * size + shorter // 2) // shorter)
    new_size = tf.stack([new_height, new_width])
    # tf.image.resize(antialias=True)'s own op and scale, with the source's extent.
    # The uint8 pixels go in as they are: the op turns each into a float as it reads
    # it, the value a float32 copy would hold, so the result is bit-identical to
    # tf.image.resize's, without writing and reading back four bytes per decoded
    # value (scripts/measure_resize_input.py, in git at 6b89e51).
    source = tf.cast(source_shape, tf.float32) / tf.cast(ratio, tf.float32)
    resized = tf.raw_ops.ScaleAndTranslate(
        images=image[tf.newaxis], size=new_size,
        scale=tf.cast(new_size, tf.float32) / source, translation=tf.zeros([2]),
        kernel_type="triangle", antialias=True)[0]
    if orientation is not None:
        resized = exif.apply_orientation(resized, orientation)
    return resized


def center_crop(resized: tf.Tensor, size: int) -> tf.Tensor:
    """The centre ``size × size`` of :func:`resize_upright`'s image, as ``uint8``:
    offsets ``(scaled - size) // 2``, values rounded half to even and clipped."""
    new_height, new_width = tf.shape(resized)[0], tf.shape(resized)[1]
    top = (new_height - size) // 2
    left = (new_width - size) // 2
    cropped = resized[top:top + size, left:left + size, :]
    cropped = tf.cast(tf.clip_by_value(tf.round(cropped), 0.0, 255.0), tf.uint8)
    cropped.set_shape([size, size, 3])
    return cropped


def encode(image: tf.Tensor, image_format: str, jpeg_quality: int) -> tf.Tensor:
    """Encodes ``uint8 [h, w, 3]`` to a scalar string in the stored format.

    ``raw`` is the row-major ``h × w × 3`` pixel bytes (read back with
    ``tf.io.decode_raw``); ``png`` is lossless; ``jpeg`` uses libjpeg with 4:2:0
    chroma subsampling at ``jpeg_quality``.
    """
    if image_format == JPEG:
        return tf.io.encode_jpeg(image, format="rgb", quality=jpeg_quality)
    if image_format == PNG:
        return tf.io.encode_png(image)
    if image_format == RAW:
        pixels = tf.reshape(tf.cast(image, tf.int32), [-1])
        return tf.strings.reduce_join(tf.gather(tf.constant(_BYTE_TABLE), pixels))
    raise ValueError(f"Unknown image format {image_format!r}; use one of {IMAGE_FORMATS}.")


def finish_pixels(image: tf.Tensor, image_bytes: tf.Tensor, size: int, *,
                  apply_exif_orientation: bool = True,
                  source_shape: tf.Tensor | None = None, ratio: tf.Tensor | int = 1
                  ) -> tuple[tf.Tensor, tf.Tensor]:
    """Decoded ``uint8 [h, w, 3]`` → ``(stored pixels uint8 [size, size, 3], EXIF
    orientation)``: :func:`finish` before its encode.

    The orientation (1..8) is read from ``image_bytes`` (the file's bytes, or at least
    its first ``exif.EXIF_SCAN_BYTES``), 1 when ``apply_exif_orientation`` is False.
    """
    orientation = (exif.read_orientation(image_bytes) if apply_exif_orientation
                   else tf.constant(1, tf.int32))
    return resize_and_center_crop(image, size,
                                  orientation if apply_exif_orientation else None,
                                  source_shape=source_shape, ratio=ratio), orientation


def thumbnails(image: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    """``uint8 [h, w, 3]`` (the stored pixels) → its ``uint8 [32, 32]`` grayscale
    thumbnail, which its perceptual hash is computed from, and the ``uint8 [32, 32,
    3]`` colour thumbnail it is made from, which the image-quality measures read:
    each channel area-averaged to 32 x 32 (``ResizeArea``: the mean of the pixels
    each thumbnail pixel covers, which also low-passes the image as the hash
    recipe's blur would); the gray levels are its ITU-R 601 luma (0.299 R + 0.587 G
    + 0.114 B); both rounded. ``imagehash.phash`` resizes with Lanczos, which cost
    1.1 ms of CPU per 224 px image here (a fifth of the job's cost per web photo)
    against under 0.3 ms for this; on 304 sample photos the two hashes were equal
    for 72 % and within 2 bits for 95 %. One resize serves both: the measures add
    only the colour thumbnail's rounding to the hash's cost."""
    # uint8 in: ResizeArea sums each pixel as a float itself, so a float32 copy of
    # the whole image first would only cost memory and time.
    small = tf.image.resize(image, [QUALITY_THUMBNAIL_SIZE] * 2, method="area")
    luma = tf.linalg.matvec(small, tf.constant([0.299, 0.587, 0.114], tf.float32))
    return _to_uint8(luma), _to_uint8(small)


def thumbnail_shapes(size: int, quality: bool) -> tuple[list[int], ...]:
    """The shapes of :func:`finish_thumbnails`' grey, colour and luma thumbnails of a
    ``size`` px stored image; the luma is ``[0, 0]`` without ``quality``."""
    side = QUALITY_THUMBNAIL_SIZE
    return [side, side], [side, side, 3], [sharpness_side(size) if quality else 0] * 2


def finish_thumbnails(pixels: tf.Tensor, shapes: tuple[list[int], ...], hashes: bool,
                      quality: bool) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
    """The stored ``pixels``' thumbnails of :func:`thumbnail_shapes` ``shapes``: grey
    and colour (:func:`thumbnails`) with ``hashes`` or ``quality``, the luma
    (:func:`sharpness_thumbnail`) with ``quality``; zeros where not taken."""
    grey, colour, luma = (tf.zeros(shape, tf.uint8) for shape in shapes)
    if hashes or quality:
        grey, colour = thumbnails(pixels)
    if quality:
        luma = sharpness_thumbnail(pixels, shapes[2][0])
    return grey, colour, luma


def sharpness_thumbnail(image: tf.Tensor, side: int) -> tf.Tensor:
    """``uint8 [h, w, 3]`` (the stored pixels) → the ``uint8 [side, side]`` luma the
    sharpness reads (``quality.sharpness_side``): the image area-averaged to ``side``
    x ``side`` (``ResizeArea``; a copy when the image is that size), then its ITU-R
    601 luma, rounded. Separate from :func:`thumbnails`, whose 32 px resize (and so
    the perceptual hash) it leaves as it is."""
    small = tf.image.resize(image, [side, side], method="area")
    return _to_uint8(tf.linalg.matvec(small, tf.constant([0.299, 0.587, 0.114], tf.float32)))


def _to_uint8(values: tf.Tensor) -> tf.Tensor:
    return tf.cast(tf.clip_by_value(tf.round(values), 0.0, 255.0), tf.uint8)


def finish(image: tf.Tensor, image_bytes: tf.Tensor, size: int, image_format: str,
           jpeg_quality: int, *, apply_exif_orientation: bool = True,
           source_shape: tf.Tensor | None = None, ratio: tf.Tensor | int = 1) -> tf.Tensor:
    """Everything after the decode: decoded ``uint8 [h, w, 3]`` → stored image bytes.

    Resize (from ``source_shape`` and ``ratio`` for a reduced-scale decode,
    :func:`source_geometry`), turn upright by the EXIF orientation read from
    ``image_bytes`` (the file's bytes, or at least its first ``exif.EXIF_SCAN_BYTES``)
    unless ``apply_exif_orientation`` is False, centre-crop (:func:`finish_pixels`),
    encode. The image job runs this on pixels it decoded itself
    (``etl.images.batches.FinishImages``), so each image is decoded once;
    :func:`preprocess`, in the exported ``transform_fn``, is the decode followed by
    this.
    """
    pixels, _ = finish_pixels(image, image_bytes, size,
                              apply_exif_orientation=apply_exif_orientation,
                              source_shape=source_shape, ratio=ratio)
    return encode(pixels, image_format, jpeg_quality)


def preprocess(image_bytes: tf.Tensor, size: int, image_format: str,
               jpeg_quality: int, *, apply_exif_orientation: bool = True,
               alpha_background: tuple[int, int, int] | None = None) -> tf.Tensor:
    """The whole per-image preprocessing: raw file bytes → stored image bytes.

    Decode (:func:`decode_rgb` at the DCT scale for ``size``, alpha dropped or
    composited on ``alpha_background``), then :func:`finish`.
    """
    image = decode_rgb(image_bytes, alpha_background=alpha_background, image_size=size)
    source_shape, ratio = source_geometry(image_bytes, image, size)
    return finish(image, image_bytes, size, image_format, jpeg_quality,
                  apply_exif_orientation=apply_exif_orientation, source_shape=source_shape,
                  ratio=ratio)
