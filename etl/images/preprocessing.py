"""tf.Transform preprocessing for images: the ``preprocessing_fn`` and its config.

Analyzers (the label vocabulary) are fit on the train split's labels only; the
exported ``transform_fn`` is then what the job applies to every image of every split
(``etl/images/shards.py``) and what serving applies to raw image bytes.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import tensorflow as tf
import tensorflow_transform as tft

from etl.images import codec
from reader import contract
from reader.contract import RAW_IMAGE_KEY, RAW_LABEL_KEY, RAW_SOURCE_KEY, UNKNOWN_LABEL_ID

RAW_FEATURE_SPEC: dict[str, tf.io.FixedLenFeature] = {
    RAW_IMAGE_KEY: tf.io.FixedLenFeature([], tf.string),
    RAW_LABEL_KEY: tf.io.FixedLenFeature([], tf.string),
    RAW_SOURCE_KEY: tf.io.FixedLenFeature([], tf.string),
}


@dataclasses.dataclass(frozen=True)
class ImagePreprocessing:
    """Parameters of the image preprocessing (all recorded in the manifest)."""

    image_size: int = 224
    image_format: str = codec.JPEG
    jpeg_quality: int = 95
    # Turn JPEGs upright by their EXIF orientation tag (False: pixels as stored).
    apply_exif_orientation: bool = True
    # Composite images with alpha on this RGB colour (None: drop the alpha channel).
    alpha_background: tuple[int, int, int] | None = None

    def __post_init__(self) -> None:
        if not 1 <= self.image_size <= 8192:
            raise ValueError(f"--image_size must be in [1, 8192], got {self.image_size}.")
        if self.image_format not in codec.IMAGE_FORMATS:
            raise ValueError(f"--image_format must be one of {codec.IMAGE_FORMATS}, "
                             f"got {self.image_format!r}.")
        if not 1 <= self.jpeg_quality <= 100:
            raise ValueError(f"--jpeg_quality must be in [1, 100], got {self.jpeg_quality}.")
        background = self.alpha_background
        if background is not None and (len(background) != 3 or not all(
                isinstance(c, int) and 0 <= c <= 255 for c in background)):
            raise ValueError(f"--alpha_background must be three integers 0-255 (R,G,B), "
                             f"got {background!r}.")

    def describe(self) -> dict[str, Any]:
        """The manifest's "preprocessing" entry for images."""
        return {
            **dataclasses.asdict(self),
            "channels": 3,
            "color": "RGB; gray replicated, palette expanded, 16-bit reduced to the "
                     "high byte, GIF first frame; " + (
                         "alpha dropped (not composited)" if self.alpha_background is None
                         else "alpha composited on alpha_background: round((c * a + bg * "
                              "(255 - a)) / 255); GIF transparency not composited"),
            "exif_orientation": (
                "applied: a JPEG's EXIF orientation (APP1 Exif, IFD0 tag 0x0112, "
                "values 2-8, as PIL.ImageOps.exif_transpose) turns the resized image "
                "upright before the centre crop (equal to turning it first up to float "
                "rounding); absent or malformed EXIF counts as 1"
                if self.apply_exif_orientation
                else "ignored: pixels kept in their stored order"),
            "decode": (
                f"JPEG: libjpeg's accurate integer IDCT ({codec.JPEG_DCT_METHOD}) at "
                "the DCT scale 1/r, r the largest of 1, 2, 4, 8 with ceil(shorter side / "
                f"r) >= {codec.JPEG_SCALE_MARGIN} x image_size (size from the "
                "header); other formats at full size"),
            "resize": "shorter side to image_size, sizes from the source image (a "
                      "JPEG's header size), bilinear with antialiasing (tf.image."
                      "resize's triangle kernel; a 1/r decode resized with each pixel "
                      "spanning r source pixels), then centre crop image_size x "
                      "image_size, round half to even",
            "label_vocabulary": "tft.vocabulary on the train split: decreasing "
                                "frequency, ties in reverse byte order; labels not "
                                f"seen in train get id {UNKNOWN_LABEL_ID}",
        }


def preprocessing_fn(inputs: dict[str, tf.Tensor], *,
                     config: ImagePreprocessing = ImagePreprocessing()
                     ) -> dict[str, tf.Tensor]:
    """Maps a batch of raw images (``RAW_FEATURE_SPEC``) to the stored features.

    Args:
        inputs: ``image`` (encoded file bytes), ``label`` (class name) and ``key``
            (source key), each a ``[batch]`` tensor.
        config: image size and stored format; bind it with ``functools.partial``.

    Returns:
        The features of docs/FORMAT.md: ``image`` (bytes in ``config.image_format``),
        ``height``, ``width``, ``channels``, ``label`` (vocabulary id),
        ``label_name`` and ``key``.
    """
    raw_images = inputs[RAW_IMAGE_KEY]
    images = tf.map_fn(
        lambda b: codec.preprocess(
            b, config.image_size, config.image_format, config.jpeg_quality,
            apply_exif_orientation=config.apply_exif_orientation,
            alpha_background=config.alpha_background),
        raw_images, fn_output_signature=tf.TensorSpec([], tf.string))
    labels = inputs[RAW_LABEL_KEY]
    # Everything but the image is computed from the other inputs, so the job can map
    # labels of images it has already finished without feeding (or decoding) their
    # bytes (etl/images/shards.py).
    batch = tf.shape(labels)[:1]
    size = tf.constant(config.image_size, tf.int64)
    return {
        contract.IMAGE_KEY: images,
        contract.HEIGHT_KEY: tf.fill(batch, size),
        contract.WIDTH_KEY: tf.fill(batch, size),
        contract.CHANNELS_KEY: tf.fill(batch, tf.constant(3, tf.int64)),
        contract.LABEL_KEY: tft.compute_and_apply_vocabulary(
            labels, vocab_filename=contract.LABEL_VOCABULARY_NAME,
            default_value=UNKNOWN_LABEL_ID),
        contract.LABEL_NAME_KEY: tf.identity(labels),
        contract.SOURCE_KEY: tf.identity(inputs[RAW_SOURCE_KEY]),
    }
