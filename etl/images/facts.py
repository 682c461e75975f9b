"""What the image job knows about each image it writes, from the image's one decode.

The shard step takes these *facts* beside the stored image (``etl.images.shards``):
the size and format its file declares, its EXIF orientation, and the quality
measures of the 32 x 32 thumbnail of the stored image the shard step's graph makes,
the one whose gray levels the perceptual hash reads (``codec.thumbnails``,
``etl.images.quality``), and of its 160 px luma (the sharpness), with its labels
and targets. They leave the shard step as one ``ShardFacts`` per shard, JSON fields
in record order, beside the duplicate signatures when those are taken too; the
statistics, the quality flags and the report are made of them
(``etl.images.stats``), so no image is read or decoded a second time.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from etl.core.stats.features import FLOAT, INT, STRING, FeatureSpec, SplitStatistics
from etl.images import codec, quality
from etl.images import labels as image_labels
from etl.images.batches import DecodedPixels, Finished, Loaded
from etl.images.duplicates import signatures as image_hashes
from etl.images.duplicates.signatures import ImageHashes
from etl.images.labels import LabelColumns
from etl.images.loading import ImageHeader
from etl.images.quality import ImageQuality
from etl.images.sources import ImageRecord

# Prefix of a numeric target's fact and feature name: "target/<column>".
TARGET_PREFIX = "target/"
# The facts the statistics describe, by kind (docs/KNOW_YOUR_DATA.md).
INT_FACTS = ("width", "height", "orientation", "file_bytes")
FLOAT_FACTS = ("megapixels", "aspect_ratio", "brightness", "brightness_p5",
               "brightness_p99", "contrast", "sharpness", "entropy", "chroma")
STRING_FACTS = ("format", "mode")
LABEL_FEATURE = "label"
# A file Pillow cannot read the header of (TensorFlow decoded it): its mode is unknown.
UNKNOWN_MODE = "unknown"


def image_facts(record: ImageRecord, data: bytes, source: tuple[int, int],
                orientation: int, header: ImageHeader | None, image_format: str,
                quality: ImageQuality | None, hashes: ImageHashes | None
                ) -> dict[str, Any]:
    """One written image's facts, JSON fields: key, file and class names always; its
    duplicate signatures with ``hashes``; with ``quality``, what its statistics and
    flags are made of. ``source`` is the file's (height, width) as stored; width
    and height in the facts are upright (swapped for EXIF orientations 5-8)."""
    facts: dict[str, Any] = {"key": record.key, "source": record.source,
                             "labels": list(image_labels.label_names(record.label))}
    if hashes is not None:
        facts.update(hashes.to_dict())
    if quality is None:
        return facts
    height, width = source if orientation < 5 else source[::-1]
    facts.update(width=width, height=height, megapixels=round(width * height / 1e6, 6),
                 aspect_ratio=round(width / height, 6), file_bytes=len(data),
                 format=image_format, orientation=orientation,
                 mode=header.mode if header is not None and header.mode else UNKNOWN_MODE,
                 **quality.to_dict())
    return facts


def batch_facts(batch: Sequence[Loaded], decoded: Sequence[DecodedPixels],
                finished: Sequence[Finished], columns: LabelColumns, hash_images: bool,
                statistics: bool) -> list[dict[str, Any]]:
    """The facts of a batch the shard step finished: each image's signatures (with
    ``hash_images``), and its sizes, format and quality measures (with ``statistics``),
    from ``decoded``, the pixels of its one decode, and ``finished``, what the
    finish graph made of them. A batch at a time: the measures are vectorised."""
    hashes: Sequence[ImageHashes | None] = [None] * len(batch)
    if hash_images:
        hashes = image_hashes.batch_hashes(
            [item.data for item in batch], [pixels.array() for pixels in decoded],
            [done.orientation for done in finished],
            np.stack([done.thumbnail for done in finished]))
    measures: Sequence[ImageQuality | None] = [None] * len(batch)
    if statistics:
        measures = quality.measure_quality(np.stack([done.quality for done in finished]),
                                           np.stack([done.luma for done in finished]))
    facts = []
    for item, pixels, done, measure, signatures in zip(
            batch, decoded, finished, measures, hashes, strict=True):
        fields = image_facts(item.record, item.data, pixels.source, done.orientation,
                             item.header, codec.sniff_format(item.data) or "unknown",
                             measure, signatures)
        facts.append(with_targets(fields, item.record, columns) if statistics else fields)
    return facts


def with_targets(facts: dict[str, Any], record: ImageRecord, columns: LabelColumns
                 ) -> dict[str, Any]:
    """``facts`` with the record's numeric targets, as given (``target/<column>``)."""
    for name, value in zip(columns.target_columns, record.targets, strict=True):
        facts[TARGET_PREFIX + name] = float(value)
    return facts


def statistics_features(columns: LabelColumns) -> list[FeatureSpec]:
    """The features of an image dataset's statistics: its facts, the class names
    (one per image; a set of them with ``--multi_label``) and the targets."""
    features = [FeatureSpec(name, INT) for name in INT_FACTS]
    features += [FeatureSpec(name, FLOAT) for name in FLOAT_FACTS]
    features += [FeatureSpec(name, STRING) for name in STRING_FACTS]
    if columns.label_column is not None:
        features.append(FeatureSpec(LABEL_FEATURE, STRING))
    features += [FeatureSpec(TARGET_PREFIX + name, FLOAT) for name in columns.target_columns]
    return features


def facts_statistics(facts: Sequence[dict[str, Any]], features: Sequence[FeatureSpec],
                     multi_label: bool) -> SplitStatistics:
    """The statistics of some images' facts (a shard's), to be merged with the
    other shards' of their split."""
    statistics = SplitStatistics(features)
    columns: dict[str, Any] = {}
    for feature in features:
        if feature.name == LABEL_FEATURE:
            labels = [f["labels"] for f in facts]
            columns[feature.name] = labels if multi_label else [
                names[0] if names else None for names in labels]
        else:
            columns[feature.name] = [f.get(feature.name) for f in facts]
    statistics.add(len(facts), columns)
    return statistics
