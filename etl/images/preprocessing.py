"""tf.Transform preprocessing for images: the ``preprocessing_fn`` and its config.

Analyzers (the label vocabulary, the numeric targets' mean and standard deviation)
are fit on the train split only; the exported ``transform_fn`` is then what the job
applies to every image of every split (``etl/images/shards.py``) and what serving
applies to raw image bytes. ``LabelColumns`` (``etl/images/labels.py``) decides which
label, target and carried features exist.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import numpy as np
import tensorflow as tf

from etl.core.transform import class_vocabulary, exact_stats, zscore
from etl.images import codec
from etl.images.labels import ONE_CLASS, LabelColumns
from etl.images.sources import ImageRecord
from reader.format import contract
from reader.format.contract import (
    RAW_IMAGE_KEY,
    RAW_LABEL_KEY,
    RAW_SOURCE_KEY,
    TARGET_KEY,
)

# Raw feature only the analysis reads: a train image's targets as exact moments
# (``etl/core/transform/exact_stats.py``), merged into the train mean and standard deviation.
TRAIN_TARGET_MOMENTS_KEY = "train_target_moments"


def serving_feature_spec(columns: LabelColumns = ONE_CLASS) -> dict[str, Any]:
    """Spec of a raw image: what the shard step and serving feed ``transform_fn``.

    ``image`` and ``key`` always; ``label`` (a string, or with ``--multi_label`` a
    variable-length list of strings) unless ``--label_column=none``; ``target``
    ``float32 [k]`` with ``--target_columns``; one string per carried column.
    """
    spec: dict[str, Any] = {
        RAW_IMAGE_KEY: tf.io.FixedLenFeature([], tf.string),
        RAW_SOURCE_KEY: tf.io.FixedLenFeature([], tf.string),
    }
    if columns.label_column is not None:
        spec[RAW_LABEL_KEY] = (tf.io.VarLenFeature(tf.string) if columns.multi_label
                               else tf.io.FixedLenFeature([], tf.string))
    if columns.target_columns:
        spec[TARGET_KEY] = tf.io.FixedLenFeature([len(columns.target_columns)], tf.float32)
    for name in columns.carry_columns:
        spec[name] = tf.io.FixedLenFeature([], tf.string)
    return spec


def raw_feature_spec(columns: LabelColumns = ONE_CLASS) -> dict[str, Any]:
    """The serving spec plus the analysis-only features."""
    spec = serving_feature_spec(columns)
    if columns.target_columns and columns.normalize_targets:
        spec[TRAIN_TARGET_MOMENTS_KEY] = tf.io.FixedLenFeature([], tf.string)
    return spec


RAW_FEATURE_SPEC = raw_feature_spec(ONE_CLASS)


def analysis_instance(record: ImageRecord, columns: LabelColumns) -> dict[str, Any]:
    """What the analysis reads of a train image, exactly its analyzers' input
    columns: its label (one name, or a set) and its targets' exact moments; never its
    bytes."""
    instance: dict[str, Any] = {}
    if columns.label_column is not None:
        instance[RAW_LABEL_KEY] = record.label
    if columns.target_columns and columns.normalize_targets:
        moments = exact_stats.moments_of(np.array([record.targets], np.float32))
        instance[TRAIN_TARGET_MOMENTS_KEY] = moments.to_bytes()
    return instance


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
        }


def _label_features(labels: Any, columns: LabelColumns) -> dict[str, Any]:
    """``label`` (vocabulary id, or sorted ids of a set) and ``label_name``."""
    ids = class_vocabulary.apply_class_vocabulary(labels, order=columns.class_order)
    if not columns.multi_label:
        return {contract.LABEL_KEY: ids, contract.LABEL_NAME_KEY: tf.identity(labels)}
    # Each row's ids ascending, its names in the same order: sort by (row, id).
    rows = ids.indices[:, 0]
    by_id = tf.argsort(ids.values, stable=True)
    order = tf.gather(by_id, tf.argsort(tf.gather(rows, by_id), stable=True))
    return {
        contract.LABEL_KEY: tf.SparseTensor(ids.indices, tf.gather(ids.values, order),
                                            ids.dense_shape),
        contract.LABEL_NAME_KEY: tf.SparseTensor(labels.indices,
                                                 tf.gather(labels.values, order),
                                                 labels.dense_shape),
    }


def _target_features(inputs: dict[str, Any], columns: LabelColumns) -> dict[str, Any]:
    """``target``, z-scored by the train split's exact statistics unless
    ``--normalize_targets=none``."""
    targets = inputs[TARGET_KEY]
    if columns.normalize_targets:
        mean, std = zscore.exact_mean_and_std(inputs[TRAIN_TARGET_MOMENTS_KEY],
                                              len(columns.target_columns),
                                              name="exact_target_mean_and_std")
        targets = zscore.normalise(targets, mean, std)
    return {TARGET_KEY: tf.identity(targets)}


@functools.cache
def _preprocess_one_image(config: ImagePreprocessing) -> Any:
    """``codec.preprocess`` for one encoded image, as a ``tf.function`` traced once
    per process and configuration. tf.Transform traces ``preprocessing_fn`` six
    times per job (analysis, schema inference, export); the image graph is most of
    each trace, and the traced function is reused by all of them."""

    @tf.function(input_signature=[tf.TensorSpec([], tf.string)], autograph=False)
    def preprocess_one(image_bytes: tf.Tensor) -> tf.Tensor:
        return codec.preprocess(image_bytes, config.image_size, config.image_format,
                                config.jpeg_quality,
                                apply_exif_orientation=config.apply_exif_orientation,
                                alpha_background=config.alpha_background)

    return preprocess_one


def preprocessing_fn(inputs: dict[str, tf.Tensor], *,
                     config: ImagePreprocessing = ImagePreprocessing(),
                     columns: LabelColumns = ONE_CLASS) -> dict[str, tf.Tensor]:
    """Maps a batch of raw images (``raw_feature_spec(columns)``) to the stored features.

    Args:
        inputs: ``image`` (encoded file bytes) and ``key`` (source key), each a
            ``[batch]`` tensor, and the label, target and carried inputs
            ``columns`` names (:func:`serving_feature_spec`).
        config: image size and stored format; bind it with ``functools.partial``.
        columns: which label, target and carried features exist.

    Returns:
        The features of docs/FORMAT.md: ``image`` (bytes in ``config.image_format``),
        ``height``, ``width``, ``channels``, ``key``; ``label`` (vocabulary id, or
        ascending ids of a set) and ``label_name`` unless there is no label column;
        ``target`` with target columns; each carried column as given.
    """
    raw_images = inputs[RAW_IMAGE_KEY]
    images = tf.map_fn(_preprocess_one_image(config), raw_images,
                       fn_output_signature=tf.TensorSpec([], tf.string))
    keys = inputs[RAW_SOURCE_KEY]
    # Everything but the image is computed from the other inputs, so the job can map
    # labels of images it has already finished without feeding (or decoding) their
    # bytes (etl/images/shards.py).
    batch = tf.shape(keys)[:1]
    size = tf.constant(config.image_size, tf.int64)
    outputs = {
        contract.IMAGE_KEY: images,
        contract.HEIGHT_KEY: tf.fill(batch, size),
        contract.WIDTH_KEY: tf.fill(batch, size),
        contract.CHANNELS_KEY: tf.fill(batch, tf.constant(3, tf.int64)),
        contract.SOURCE_KEY: tf.identity(keys),
    }
    if columns.label_column is not None:
        outputs.update(_label_features(inputs[RAW_LABEL_KEY], columns))
    if columns.target_columns:
        outputs.update(_target_features(inputs, columns))
    for name in columns.carry_columns:
        outputs[name] = tf.identity(inputs[name])
    return outputs
