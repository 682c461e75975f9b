"""What the report shows of the stored records: image thumbnails and series, streamed.

A split's shards are read front to back (GZIP or uncompressed TFRecord frames, both
CRCs checked by :mod:`reader.format.record_index`, each Example parsed by
:mod:`reader.format.example_proto`), and the read stops as soon as what is wanted is found:
a few images of each class, every flagged image and both images of every duplicate
pair the report shows, or a few series' windows. The report runs at the end of every
job, so what it reads is bounded.
Nothing here imports TensorFlow.
"""

from __future__ import annotations

import base64
import dataclasses
import gzip
import io
import posixpath
import zlib
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np
from PIL import Image

from reader import records
from reader.format import contract, example_proto, record_index
from reader.format.contract import DatasetError

# Thumbnails are at most this many pixels wide (larger stored images are shrunk by
# area and stored as JPEG; smaller ones kept pixel for pixel as PNG).
THUMBNAIL_SIZE = 64
THUMBNAIL_JPEG_QUALITY = 85
SAMPLES_PER_CLASS = 4
MAX_SAMPLE_CLASSES = 40
# Images shown without classes (regression): the first ones of train.
UNLABELLED_SAMPLES = 12
# Time series: how many series are drawn, and how many windows of each split are
# read at most to find theirs (windows are stored in hash order, so a bounded read
# is a sample spread over the whole split; overlapping windows cover most of a
# series' rows from a fraction of them). Reading is the report's whole cost: 4,000
# windows take about 0.07 s here, the 41,000 of 3.2 M hourly rows 0.7 s.
SERIES_SHOWN = 3
MAX_WINDOWS_PER_SPLIT = 4_000


def stream_records(path: str, compression: str) -> Iterator[bytes]:
    """The serialized records of one shard in file order, both checksums verified.

    Raises:
        DatasetError: the file is not a GZIP stream, or a frame is cut short or
            fails a CRC check (naming the file).
    """
    try:
        with records.open_file(path) as raw:
            stream = (gzip.GzipFile(fileobj=raw, mode="rb")
                      if compression == contract.GZIP else raw)
            yield from record_index.read_frames(stream, path)
    except record_index.RecordError as e:
        raise DatasetError(str(e)) from e
    except (OSError, EOFError, zlib.error) as e:
        if isinstance(e, FileNotFoundError):
            raise
        raise DatasetError(f"{path}: the shard does not read as "
                           f"{compression} TFRecords ({e})") from e


def split_records(data_dir: str, manifest: Mapping[str, Any], split: str
                  ) -> Iterator[Any]:
    """Every Example of ``split`` (parsed protos), shard by shard in manifest order."""
    compression = contract.compression_of(manifest)
    for shard in manifest["splits"].get(split, {}).get("shards", []):
        for serialized in stream_records(posixpath.join(data_dir, shard["path"]),
                                         compression):
            try:
                yield example_proto.Example.FromString(serialized)
            except Exception as e:  # protobuf's DecodeError, whatever the backend
                raise DatasetError(f"{shard['path']}: a record is not an Example ({e})"
                                   ) from e


def feature_values(example: Any, name: str) -> list[Any]:
    """The values of feature ``name`` of a parsed Example ([] if it has none)."""
    feature = example.features.feature.get(name)
    if feature is None or feature.WhichOneof("kind") is None:
        return []
    return list(getattr(feature, feature.WhichOneof("kind")).value)


def feature_text(example: Any, name: str) -> str:
    """The first value of a string feature as text ("" if it has none)."""
    values = feature_values(example, name)
    return values[0].decode("utf-8", "replace") if values else ""


@dataclasses.dataclass(frozen=True)
class Thumbnail:
    """One stored image as the report shows it.

    Attributes:
        key: the image's key; split: its split.
        caption: its label names (comma-separated) and targets in the input's units.
        uri: a ``data:image/png`` or ``data:image/jpeg`` URI of the thumbnail.
    """

    key: str
    split: str
    caption: str
    uri: str


def thumbnail_uri(pixels: np.ndarray) -> str:
    """``uint8 [s, s, 3]`` → a data URI: PNG as it is up to :data:`THUMBNAIL_SIZE`,
    else shrunk by area to it and JPEG-encoded."""
    image = Image.fromarray(pixels)
    buffer = io.BytesIO()
    if max(image.size) <= THUMBNAIL_SIZE:
        image.save(buffer, format="PNG")
        return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()
    image = image.resize((THUMBNAIL_SIZE, THUMBNAIL_SIZE), Image.Resampling.BOX)
    image.save(buffer, format="JPEG", quality=THUMBNAIL_JPEG_QUALITY)
    return "data:image/jpeg;base64," + base64.b64encode(buffer.getvalue()).decode()


def _target_caption(manifest: Mapping[str, Any], example: Any) -> str:
    targets = manifest.get(contract.TARGETS_ENTRY)
    values = np.asarray(feature_values(example, contract.TARGET_KEY), np.float64)
    if not targets or len(values) != len(targets["columns"]):
        return ""
    if targets.get("normalize") == contract.ZSCORE:
        values = values * np.asarray(targets["std"]) + np.asarray(targets["mean"])
    return ", ".join(f"{c}={v:.4g}" for c, v in zip(targets["columns"], values,
                                                     strict=True))


def _thumbnail(manifest: Mapping[str, Any], example: Any, split: str) -> Thumbnail:
    encoded = feature_values(example, contract.IMAGE_KEY)[0]
    pixels = records.decode_image(encoded, manifest["preprocessing"])
    names = [v.decode("utf-8", "replace") for v in feature_values(example, contract.LABEL_NAME_KEY)]
    caption = "\n".join(part for part in (", ".join(names), _target_caption(manifest, example))
                        if part)
    return Thumbnail(feature_text(example, contract.SOURCE_KEY), split, caption,
                     thumbnail_uri(pixels))


@dataclasses.dataclass
class ImageFinds:
    """What a scan of the image shards found.

    Attributes:
        samples: class name (``""`` without classes) → its first thumbnails in train.
        by_key: key → thumbnail, for the keys asked for (flagged images, the two
            images of duplicate pairs).
        records_read: Examples parsed.
    """

    samples: dict[str, list[Thumbnail]]
    by_key: dict[str, Thumbnail]
    records_read: int = 0


def _sample_quota(manifest: Mapping[str, Any]) -> dict[str, int]:
    vocab = list(manifest.get("label_vocab") or [])
    if not vocab:
        return {"": UNLABELLED_SAMPLES}
    return {name: SAMPLES_PER_CLASS for name in vocab[:MAX_SAMPLE_CLASSES]}


def scan_images(data_dir: str, manifest: Mapping[str, Any],
                wanted_keys: Mapping[str, Sequence[str]]) -> ImageFinds:
    """A few train images per class and the images ``wanted_keys`` names
    (``{split: [key, ...]}``), each split read only until all are found."""
    quota = _sample_quota(manifest)
    finds = ImageFinds({name: [] for name in quota}, {})
    for split in contract.ordered_splits(manifest["splits"]):
        wanted = set(wanted_keys.get(split, ()))
        sampling = split == contract.TRAIN
        if not wanted and not sampling:
            continue
        for example in split_records(data_dir, manifest, split):
            finds.records_read += 1
            key = feature_text(example, contract.SOURCE_KEY)
            names = [v.decode("utf-8", "replace")
                     for v in feature_values(example, contract.LABEL_NAME_KEY)] or [""]
            open_classes = [n for n in names if sampling and len(finds.samples.get(
                n, ())) < quota.get(n, 0)]
            if key in wanted or open_classes:
                thumbnail = _thumbnail(manifest, example, split)
                for name in open_classes:
                    finds.samples[name].append(thumbnail)
                if key in wanted:
                    finds.by_key[key] = thumbnail
                    wanted.discard(key)
            sampling = sampling and any(len(finds.samples[n]) < quota[n] for n in quota)
            if not wanted and not sampling:
                break
    return finds
