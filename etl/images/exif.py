"""A JPEG's EXIF orientation: read from the file's bytes and applied to its pixels,
as TensorFlow ops.

Phones and cameras store many photos sideways or mirrored with an orientation tag
that TensorFlow's decoders ignore. Reading and applying the tag in the graph puts it
inside the exported ``transform_fn``, so serving turns raw bytes exactly as the job
did. No Apache Beam import here: ``etl.images.codec``, which the reader imports,
uses it.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

# Where the EXIF block is looked for, and how far.
EXIF_SCAN_BYTES = 64 * 1024
_EXIF_SIGNATURE = b"Exif\x00\x00"
_MAX_IFD_ENTRIES = 128
_ORIENTATION_TAG = 0x0112
_TIFF_SHORT, _TIFF_LONG = 3, 4


def read_orientation(image_bytes: tf.Tensor) -> tf.Tensor:
    """The EXIF orientation (``int32`` 1..8) of a JPEG file's bytes, else 1.

    Reads, with TensorFlow string ops, the first APP1 segment whose payload starts
    with ``Exif\\0\\0`` within the first ``EXIF_SCAN_BYTES`` of a JPEG, its TIFF header
    (``II`` little- or ``MM`` big-endian, magic 42) and the IFD0 entry of tag
    0x0112 (type SHORT or LONG, count 1, value 1..8) among its first 128 entries.
    Every offset is checked against the segment's end and the bytes read (IFD0 must
    lie whole inside the segment): a file that is not a JPEG, has no EXIF, or whose
    EXIF is malformed or truncated gives 1 (as stored), never an error.
    """
    head = tf.strings.substr(image_bytes, 0, EXIF_SCAN_BYTES)
    size = tf.cast(tf.strings.length(head), tf.int64)
    # Offset of the first "Exif\0\0" (= size when there is none): the APP1 marker
    # and its length sit in the 4 bytes before it, the TIFF header after it.
    signature = tf.cast(tf.strings.length(
        tf.strings.split(head, sep=_EXIF_SIGNATURE, maxsplit=1)[0]), tf.int64)
    segment = signature - 4
    present = ((signature < size) & (segment >= 2)
               & tf.equal(tf.strings.substr(head, 0, 3), b"\xff\xd8\xff")
               & tf.equal(tf.strings.substr(head, tf.maximum(segment, 0), 2), b"\xff\xe1"))

    def window(start: tf.Tensor, length: int) -> tf.Tensor:
        # Bytes [start, start + length) as float64 (exact for these integers), zero
        # past the end of the head.
        start = tf.clip_by_value(start, 0, size)
        raw = tf.io.decode_raw(tf.strings.substr(head, start, length), tf.uint8,
                               fixed_length=length)
        return tf.cast(raw, tf.float64)

    def parse() -> tf.Tensor:
        app1 = window(segment, 18)  # FF E1, length, "Exif\0\0", TIFF header
        end = tf.minimum(segment + 2 + tf.cast(app1[2] * 256 + app1[3], tf.int64), size)
        little = tf.equal(app1[10], 0x49) & tf.equal(app1[11], 0x49)  # "II"
        big = tf.equal(app1[10], 0x4D) & tf.equal(app1[11], 0x4D)  # "MM"
        # TIFF integers: bytes times the byte order's place values, as one matmul.
        magic, offset = tf.unstack(tf.cast(tf.linalg.matvec(
            tf.where(little, tf.constant(_TIFF_HEADER_LE), tf.constant(_TIFF_HEADER_BE)),
            app1[12:18]), tf.int64))
        ifd = signature + 6 + offset
        entries = window(ifd, 2 + 12 * _MAX_IFD_ENTRIES)
        count = tf.cast(tf.where(little, entries[0] + 256 * entries[1],
                                 256 * entries[0] + entries[1]), tf.int64)
        fields = tf.cast(tf.matmul(  # [entries, (tag, type, count, short, long)]
            tf.reshape(entries[2:], [_MAX_IFD_ENTRIES, 12]),
            tf.where(little, tf.constant(_IFD_ENTRY_LE), tf.constant(_IFD_ENTRY_BE))),
            tf.int64)
        tag, kind, number, short, long = tf.unstack(fields, axis=1)
        value = tf.where(tf.equal(kind, _TIFF_SHORT), short, long)
        match = ((tf.range(_MAX_IFD_ENTRIES, dtype=tf.int64) < count)
                 & tf.equal(tag, _ORIENTATION_TAG)
                 & (tf.equal(kind, _TIFF_SHORT) | tf.equal(kind, _TIFF_LONG))
                 & tf.equal(number, 1) & (value >= 1) & (value <= 8))
        valid = ((little | big) & tf.equal(magic, 42) & (ifd + 2 + 12 * count <= end)
                 & tf.reduce_any(match))
        first = tf.argmax(tf.cast(match, tf.int32), output_type=tf.int64)
        return tf.where(valid, tf.cast(tf.gather(value, first), tf.int32), 1)

    # Most files have no EXIF block: they skip the parse.
    return tf.cond(present, parse, lambda: tf.constant(1, tf.int32))


def _place_values(layout: list[tuple[int, int]], width: int, little: bool) -> np.ndarray:
    """``[width, len(layout)]`` float64: column j turns bytes ``[start, start + n)``
    of a row into the unsigned integer they hold in that byte order."""
    matrix = np.zeros((width, len(layout)), np.float64)
    for column, (start, n) in enumerate(layout):
        for i in range(n):
            matrix[start + i, column] = 256.0 ** (i if little else n - 1 - i)
    return matrix


# TIFF header after the byte-order mark: magic (2 bytes), IFD0 offset (4 bytes).
_TIFF_HEADER = [(0, 2), (2, 4)]
# An IFD entry: tag (2), type (2), count (4), value as SHORT (2) or LONG (4).
_IFD_ENTRY = [(0, 2), (2, 2), (4, 4), (8, 2), (8, 4)]
_TIFF_HEADER_LE = _place_values(_TIFF_HEADER, 6, little=True).T
_TIFF_HEADER_BE = _place_values(_TIFF_HEADER, 6, little=False).T
_IFD_ENTRY_LE = _place_values(_IFD_ENTRY, 12, little=True)
_IFD_ENTRY_BE = _place_values(_IFD_ENTRY, 12, little=False)


def apply_orientation(image: tf.Tensor, orientation: tf.Tensor) -> tf.Tensor:
    """Turns stored pixels ``[h, w, c]`` upright for an EXIF orientation 1..8.

    The EXIF rule (as Pillow's ``ImageOps.exif_transpose``): 1 as stored, 2 mirror
    left-right, 3 rotate 180°, 4 mirror top-bottom, 5 transpose, 6 rotate 90°
    clockwise, 7 transverse, 8 rotate 90° counter-clockwise; any other value is
    taken as 1.
    """
    channels = image.shape[-1]
    orientation = tf.where((orientation >= 1) & (orientation <= 8), orientation, 1)

    def upright() -> tf.Tensor:
        # A transpose (orientations 5-8), then flips; tf.switch_case instead made
        # tf.Transform count the image among the analyzers' inputs.
        transposed = tf.transpose(image, tf.where(orientation >= 5, [1, 0, 2], [0, 1, 2]))
        flips = tf.stack([tf.reduce_any(tf.equal(orientation, [3, 4, 7, 8])),  # up-down
                          tf.reduce_any(tf.equal(orientation, [2, 3, 6, 7]))])  # left-right
        return tf.reverse(transposed, tf.boolean_mask([0, 1], flips))

    # Orientation 1, nearly every image, is not copied at all.
    oriented = tf.cond(tf.equal(orientation, 1), lambda: image, upright)
    oriented.set_shape([None, None, channels])
    return oriented
