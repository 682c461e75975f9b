"""Image decode → RGB → resize → centre-crop → encode, as pure TensorFlow ops.

The same functions run in the validation step (eagerly, to reject bad files before
tf.Transform) and inside ``preprocessing_fn`` (in the exported ``transform_fn``), so
serving applies byte-for-byte the preprocessing that produced the stored examples.
The reader decodes stored images with ``reader.contract.decode_stored_image``.
"""

from __future__ import annotations

import tensorflow as tf

from reader.contract import IMAGE_FORMATS, JPEG, PNG, RAW

# Leading bytes of the containers tf.io.decode_image understands.
_MAGIC: tuple[tuple[bytes, str], ...] = (
    (b"\xff\xd8\xff", "jpeg"),
    (b"\x89PNG\r\n\x1a\n", "png"),
    (b"GIF87a", "gif"),
    (b"GIF89a", "gif"),
    (b"BM", "bmp"),
)

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


def decode_rgb(image_bytes: tf.Tensor) -> tf.Tensor:
    """Decodes one encoded image to ``uint8 [height, width, 3]``.

    Normalisation rules (documented in docs/FORMAT.md): grayscale is replicated to
    three channels; palette images are expanded; an alpha channel is dropped (not
    composited); 16-bit PNG keeps the high byte of each sample; GIF keeps its first
    frame; EXIF orientation is not applied.

    Raises:
        tf.errors.InvalidArgumentError: for bytes that are not a decodable image.
    """
    image = tf.io.decode_image(image_bytes, channels=3, dtype=tf.uint8,
                               expand_animations=False)
    image.set_shape([None, None, 3])
    return image


def resize_and_center_crop(image: tf.Tensor, size: int) -> tf.Tensor:
    """Resizes the shorter side to ``size`` and crops the centre ``size × size``.

    The scaled longer side is ``round(long * size / short)`` in integer arithmetic;
    resampling is bilinear with antialiasing (``tf.image.resize(..., antialias=True)``,
    which behaves like area averaging when shrinking); values are rounded half to
    even and clipped to ``uint8``. Crop offsets are ``(scaled - size) // 2``.
    """
    shape = tf.shape(image)
    height, width = shape[0], shape[1]
    shorter = tf.minimum(height, width)
    new_height = tf.maximum(size, (height * size + shorter // 2) // shorter)
    new_width = tf.maximum(size, (width * size + shorter // 2) // shorter)
    resized = tf.image.resize(image, tf.stack([new_height, new_width]),
                              method=tf.image.ResizeMethod.BILINEAR, antialias=True)
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


def preprocess(image_bytes: tf.Tensor, size: int, image_format: str,
               jpeg_quality: int) -> tf.Tensor:
    """The whole per-image preprocessing: raw file bytes → stored image bytes."""
    image = resize_and_center_crop(decode_rgb(image_bytes), size)
    return encode(image, image_format, jpeg_quality)


def check_decodable(data: bytes) -> tuple[int, int]:
    """Fully decodes ``data`` the way the transform will, returning (height, width).

    Raises:
        tf.errors.InvalidArgumentError: if TensorFlow cannot decode it.
    """
    # Eager on purpose: a single op needs no tracing, and eager errors carry the
    # decoder's message without a graph traceback.
    shape = decode_rgb(tf.constant(data)).shape
    return int(shape[0]), int(shape[1])
