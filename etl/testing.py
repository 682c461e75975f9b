"""Small fixtures for users' tests, and what a job wrote read back as plain values.

Writes a folder or manifest of real photos (crops of scikit-learn's two sample
photos, bad files on request) or a long-format series file, and reads a written
dataset's records and dead letters (``JobResult``). Running a job is the jobs'
layer's: ``pipelines.testing`` adds ``run_images_job`` and ``run_timeseries_job`` and
hands on every name here, so a user's test imports that one module
(docs/TESTING_YOUR_DATA.md). Photos need scikit-learn
(``pip install 'tfrecord-etl[testing]'``).
"""

from __future__ import annotations

import csv
import dataclasses
import functools
import io
import json
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np
from PIL import Image

from etl.core import dead_letters
from etl.core.io import storage
from reader import records
from reader.format import contract, example_proto

StrPath = str | os.PathLike
# The image formats the writer encodes, with their file extensions.
IMAGE_EXTENSIONS: Mapping[str, str] = {"jpeg": "jpg", "png": "png", "gif": "gif",
                                       "bmp": "bmp", "webp": "webp"}
# Bad inputs on request: kind → (file name, the dead-letter reason the job gives it).
# A ``stray`` photo lies outside any class folder (in a manifest: its label is empty).
BAD_FILES: Mapping[str, tuple[str, str]] = {
    "truncated": ("bad-truncated.jpg", dead_letters.UNDECODABLE_IMAGE),
    "not_an_image": ("bad-not-an-image.png", dead_letters.UNSUPPORTED_FORMAT),
    "empty": ("bad-empty.jpg", dead_letters.EMPTY_FILE),
    "corrupt": ("bad-corrupt.jpg", dead_letters.CORRUPT_IMAGE_DATA),
    "stray": ("stray.png", dead_letters.MISSING_LABEL),
}
_MANIFEST_SUFFIXES = (".csv", ".jsonl")


@functools.lru_cache(maxsize=1)
def _photos() -> tuple[np.ndarray, ...]:
    try:
        from sklearn.datasets import load_sample_images
    except ImportError as e:
        raise ImportError("etl.testing's photos are crops of scikit-learn's sample photos, "
                          "and scikit-learn is not installed: pip install "
                          "'tfrecord-etl[testing]'") from e
    return tuple(load_sample_images().images)


def sample_photo(index: int, size: int | tuple[int, int] = (48, 64), seed: int = 0
                 ) -> np.ndarray:
    """A ``uint8 [height, width, 3]`` photo: a crop of one of scikit-learn's two sample
    photos (427 x 640), resized to ``size`` (``(height, width)`` or one side), its
    place and scale drawn from ``(seed, index)``: each index gives another image.

    Raises:
        ImportError: scikit-learn is not installed.
    """
    height, width = (size, size) if isinstance(size, int) else size
    source = _photos()[index % 2]
    rng = np.random.default_rng([seed, index])
    rows, cols = source.shape[:2]
    crop_h = int(rows * rng.uniform(0.3, 0.9))
    crop_w = min(cols, max(1, round(crop_h * width / height)))
    top, left = int(rng.integers(rows - crop_h + 1)), int(rng.integers(cols - crop_w + 1))
    crop = Image.fromarray(source[top:top + crop_h, left:left + crop_w])
    return np.asarray(crop.resize((width, height), Image.Resampling.BILINEAR))


def encode_image(pixels: np.ndarray, image_format: str) -> bytes:
    """``uint8 [h, w, 3]`` pixels as a file of ``image_format`` (``IMAGE_EXTENSIONS``),
    written by Pillow (JPEG and WebP at quality 90, GIF with an adaptive palette)."""
    if image_format not in IMAGE_EXTENSIONS:
        raise ValueError(f"Unknown image format {image_format!r}; use one of "
                         f"{sorted(IMAGE_EXTENSIONS)}.")
    image, buf = Image.fromarray(pixels), io.BytesIO()
    if image_format == "gif":
        image = image.convert("P", palette=Image.Palette.ADAPTIVE)
    options = {"quality": 90} if image_format in ("jpeg", "webp") else {}
    image.save(buf, image_format.upper(), **options)
    return buf.getvalue()


def textured_jpeg(height: int = 96, width: int = 128, seed: int = 0, **save: Any) -> bytes:
    """A JPEG of smooth gradients plus noise (Pillow, quality 90 unless ``save`` says):
    enough coded data (about 10 KB at 96 x 128) for damage in its middle to be damage
    to the pixels."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width]
    base = np.stack([x * 255 / width, y * 255 / height, (x + y) * 127 / (width + height)], -1)
    pixels = np.clip(base + rng.normal(0, 24, (height, width, 3)), 0, 255).astype(np.uint8)
    buf = io.BytesIO()
    Image.fromarray(pixels).save(buf, "JPEG", **{"quality": 90, **save})
    return buf.getvalue()


def corrupt_mid_stream(jpeg: bytes, seed: int, nbytes: int = 64) -> bytes:
    """``jpeg`` with ``nbytes`` random bytes over the middle of its coded data: damage
    TensorFlow decodes without an error (libjpeg only warns) and the job's strict
    decode rejects (``corrupt_image_data``)."""
    sos = jpeg.index(b"\xff\xda")  # Start of scan: its length, then the coded data.
    start = sos + 2 + int.from_bytes(jpeg[sos + 2:sos + 4], "big")
    at = start + (len(jpeg) - start) // 2 - nbytes // 2
    damaged = bytearray(jpeg)
    damaged[at:at + nbytes] = np.random.default_rng(seed).integers(
        0, 256, nbytes, dtype=np.uint8).tobytes()
    return bytes(damaged)


def _bad_bytes(kind: str, seed: int) -> bytes:
    if kind == "truncated":  # Ends inside the coded data: "Premature end of JPEG file".
        return (jpeg := encode_image(sample_photo(1_000_000, 64, seed), "jpeg"))[:len(jpeg) // 2]
    if kind == "stray":
        return encode_image(sample_photo(1_000_001, 24, seed), "png")
    return {"not_an_image": b"this is not an image", "empty": b"",
            "corrupt": corrupt_mid_stream(textured_jpeg(), seed=0)}[kind]


@dataclasses.dataclass(frozen=True)
class ImageFixtures:
    """What ``write_images`` wrote: ``input`` for ``--input`` (the folder or the
    manifest); the good images' ``keys`` (as the job names them), in writing order,
    each one's ``labels`` and, where asked, ``splits``; each bad input's key → the
    reason the job rejects it with (``bad``)."""

    input: str
    keys: tuple[str, ...]
    labels: Mapping[str, str]
    splits: Mapping[str, str]
    bad: Mapping[str, str]

    @property
    def inputs(self) -> int:  # How many inputs the job will list.
        return len(self.keys) + len(self.bad)


def write_images(input_path: StrPath, labels: Sequence[str] = ("cat", "dog"),
                 per_label: int = 4, *, formats: Sequence[str] = ("jpeg",),
                 size: int | tuple[int, int] = (48, 64), seed: int = 0,
                 splits: Sequence[str] | None = None, bad: Iterable[str] = (),
                 columns: Mapping[str, Callable[[int, str], Any]] | None = None
                 ) -> ImageFixtures:
    """Writes ``per_label`` photos per label (``sample_photo(i, size, seed)``, image
    ``i`` in ``formats[i % len(formats)]``), as the job's two input forms:

    * a folder ``input_path``: ``<label>/<label>-NNN.<ext>``, or with ``splits``
      ``<split>/<label>/...``, image ``n`` of a label in ``splits[n % len(splits)]``;
    * ``input_path`` ending ``.csv`` or ``.jsonl``: the photos as
      ``images/<label>-NNN.<ext>`` beside it, and a manifest of ``path,label[,split]``
      and ``columns``, each column a name → ``f(i, label)`` giving its value in row
      ``i`` (targets, carried ids; a list, e.g. tags for ``--multi_label``, is
      joined with ``|`` in a CSV).

    ``bad`` names ``BAD_FILES`` kinds, written beside the first label's photos (a
    ``stray`` one into the folder itself; in a manifest with the first label, a
    ``stray`` one with none, and each column's value for ``i = -1``).

    Raises:
        ValueError: an unknown format or bad kind, no label, ``per_label < 1``, or
            ``columns`` for a folder.
        ImportError: scikit-learn is not installed.
    """
    path, bad = os.fspath(input_path), list(bad)
    unknown = sorted(set(formats) - set(IMAGE_EXTENSIONS)) + sorted(set(bad) - set(BAD_FILES))
    if unknown or not labels or per_label < 1 or not formats:
        raise ValueError(f"Give labels, per_label >= 1, formats of {sorted(IMAGE_EXTENSIONS)}"
                         f" and bad kinds of {sorted(BAD_FILES)}; unknown: {unknown}.")
    manifest = path.lower().endswith(_MANIFEST_SUFFIXES)
    if columns and not manifest:
        raise ValueError(f"columns go in a .csv or .jsonl manifest; {path!r} is a folder.")
    folder = (os.path.dirname(path) or ".") if manifest else path

    def key_of(label: str, split: str | None, name: str) -> str:  # label "": stray
        folders = ["images"] if manifest else [split, label] if label else []
        return "/".join([*filter(None, folders), name])

    rows: list[tuple[str, str, str | None, int]] = []  # (key, label, split, i)
    for i, (label, n) in enumerate((label, n) for label in labels for n in range(per_label)):
        split = splits[n % len(splits)] if splits else None
        image_format = formats[i % len(formats)]
        key = key_of(label, split, f"{label}-{n:03d}.{IMAGE_EXTENSIONS[image_format]}")
        storage.write_bytes(storage.join(folder, key),
                            encode_image(sample_photo(i, size, seed), image_format))
        rows.append((key, label, split, i))
    good, first_split, bad_keys = rows[:], splits[0] if splits else None, {}
    for kind in bad:
        name, reason = BAD_FILES[kind]
        label = "" if kind == "stray" else labels[0]
        key = key_of(label, first_split, name)
        storage.write_bytes(storage.join(folder, key), _bad_bytes(kind, seed))
        bad_keys[key] = reason
        rows.append((key, label, first_split, -1))
    if manifest:
        storage.write_text(path, _table(path, [
            {"path": key, "label": label, **({"split": split} if split else {}),
             **{column: f(i, label) for column, f in (columns or {}).items()}}
            for key, label, split, i in rows]))
    return ImageFixtures(path, tuple(row[0] for row in good),
                         {key: label for key, label, _, _ in good},
                         {key: split for key, _, split, _ in good if split}, bad_keys)


def _table(path: str, rows: list[dict[str, Any]]) -> str:
    """Rows as CSV (``csv.writer``'s lines; a list joined with ``|``) or JSON Lines."""
    if path.lower().endswith(".jsonl"):
        return "".join(json.dumps(row) + "\n" for row in rows)
    if not path.lower().endswith(".csv"):
        raise ValueError(f"Write a .csv or .jsonl file, not {path!r}.")
    header = list(dict.fromkeys(name for row in rows for name in row))
    text = io.StringIO()
    writer = csv.writer(text)
    writer.writerow(header)
    writer.writerows([("|".join(map(str, v)) if isinstance(v, list | tuple) else v)
                      for v in (row.get(name, "") for name in header)] for row in rows)
    return text.getvalue()


@dataclasses.dataclass(frozen=True)
class SeriesFixtures:
    """What ``write_series`` wrote: ``input`` for ``--input``, each series id's row
    count (``lengths``) and the value columns."""

    input: str
    lengths: Mapping[str, int]
    value_columns: tuple[str, ...]

    @property
    def rows(self) -> int:
        return sum(self.lengths.values())


def write_series(path: StrPath, lengths: Sequence[int] = (60, 45, 33), *,
                 ids: Sequence[str] | None = None, value_columns: Sequence[str] = ("value",),
                 start: int = 0, step: int = 1) -> SeriesFixtures:
    """Writes long-format rows ``series_id,timestamp,<value_columns>`` to ``path``
    (``.csv`` or ``.jsonl``), series by series: series ``ids[k]`` (default ``a``,
    ``b``, ...) has ``lengths[k]`` rows, at integer timestamps ``start + t * step``;
    value column ``j`` holds ``round(((t + 17 * j) * 7919 % 101) / 10, 1)``.

    Raises:
        ValueError: as many ids as lengths are not given, or another suffix.
    """
    path = os.fspath(path)
    ids = list(ids) if ids is not None else [
        chr(ord("a") + k) if k < 26 else f"s{k:03d}" for k in range(len(lengths))]
    if len(ids) != len(lengths):
        raise ValueError(f"{len(ids)} series ids for {len(lengths)} lengths.")
    rows = [{"series_id": series, "timestamp": start + t * step,
             **{column: round(((t + 17 * j) * 7919 % 101) / 10.0, 1)
                for j, column in enumerate(value_columns)}}
            for series, length in zip(ids, lengths, strict=True) for t in range(length)]
    storage.write_text(path, _table(path, rows))
    return SeriesFixtures(path, dict(zip(ids, lengths, strict=True)), tuple(value_columns))


def read_rejected(output_dir: StrPath, manifest: Mapping[str, Any] | None = None
                  ) -> list[dict[str, Any]]:
    """The dead letters (dicts with ``key``, ``reason``, ``message``) of every version
    the manifest lists; without a manifest (a withheld dataset), those of
    ``errors/rejected.jsonl``."""
    out = os.fspath(output_dir)
    if manifest is None and storage.exists(storage.join(out, contract.MANIFEST_FILENAME)):
        manifest = records.load_manifest(out)
    files = [entry["rejected_file"] for entry in (manifest or {}).get("history", [])
             if entry.get("rejected_file")]
    found = []
    for relpath in files or [f"{contract.ERRORS_DIRNAME}/{contract.REJECTED_FILENAME}"]:
        text = storage.read_text(storage.join(out, relpath))
        found += [json.loads(line) for line in text.splitlines() if line.strip()]
    return found


def read_records(output_dir: StrPath, split: str, *, manifest: Mapping[str, Any] | None = None,
                 as_numpy: bool = False) -> list[dict[str, Any]]:
    """The records of ``split`` in shard order, each a dict of feature → value: plain
    Python values (``int``, ``float``, ``str`` or nested lists of them, shaped by the
    manifest's feature spec; ``image`` stays its stored bytes), or with ``as_numpy``
    what ``tf.io.parse_single_example`` gives (NumPy scalars and arrays, ``bytes``).
    Shards read by ``tf.data.TFRecordDataset``, parsed by ``reader.format.example_proto``.

    Raises:
        ValueError: an unknown split.
    """
    import tensorflow as tf

    out = os.fspath(output_dir)
    manifest = records.load_manifest(out) if manifest is None else manifest
    contract.check_splits(manifest, out, [split])
    files = [storage.join(out, shard["path"]) for shard in manifest["splits"][split]["shards"]]
    if not files:
        return []
    features = manifest["features"]
    dataset = tf.data.TFRecordDataset(files, contract.tf_compression_type(manifest))
    parsed = [example_proto.parse_example(serialized, features)
              for batch in dataset.batch(256).as_numpy_iterator() for serialized in batch]
    return parsed if as_numpy else [_plain(example, features) for example in parsed]


def _plain(example: Mapping[str, Any], features: Mapping[str, Mapping[str, Any]]
           ) -> dict[str, Any]:
    plain = {}
    for name, value in example.items():
        if name == contract.IMAGE_KEY or features[name]["dtype"] != "string":
            plain[name] = value if isinstance(value, bytes) else value.tolist()
        else:
            plain[name] = (value.decode("utf-8") if isinstance(value, bytes)
                           else [v.decode("utf-8") for v in value])
    return plain


@dataclasses.dataclass(frozen=True)
class JobResult:
    """A finished job's output: examples per split (``counts``), ``inputs`` listed,
    examples ``written``, the dead letters (``rejected``: a tuple of ``read_rejected``'s
    dicts), the label vocabulary (a tuple, or None) and what a quiet run printed."""

    output_dir: str
    manifest: dict[str, Any] = dataclasses.field(repr=False)
    counts: dict[str, int]
    inputs: int
    written: int
    rejected: tuple[dict[str, Any], ...] = dataclasses.field(repr=False)
    label_vocabulary: tuple[str, ...] | None
    stdout: str = dataclasses.field(default="", repr=False)
    stderr: str = dataclasses.field(default="", repr=False)

    @classmethod
    def from_output_dir(cls, output_dir: StrPath, manifest: Mapping[str, Any] | None = None,
                        stdout: str = "", stderr: str = "") -> JobResult:
        """The result for a dataset already written (by a command, say)."""
        out = os.fspath(output_dir)
        manifest = dict(records.load_manifest(out) if manifest is None else manifest)
        counts = {split: entry["num_records"]
                  for split, entry in manifest.get("splits", {}).items()}
        vocabulary = manifest.get("task") in (contract.CLASSIFICATION, contract.MULTI_LABEL)
        return cls(out, manifest, counts, manifest.get("inputs", 0), sum(counts.values()),
                   tuple(read_rejected(out, manifest)) if manifest else (),  # {}: a dry run
                   tuple(manifest["label_vocab"]) if vocabulary else None, stdout, stderr)

    @property
    def rejected_reasons(self) -> dict[str, str]:
        """Key → reason of every dead letter."""
        return {letter["key"]: letter["reason"] for letter in self.rejected}

    def records(self, split: str, *, as_numpy: bool = False) -> list[dict[str, Any]]:
        """The records of ``split``, as ``read_records`` gives them."""
        return read_records(self.output_dir, split, manifest=self.manifest,
                            as_numpy=as_numpy)

    def decode_image(self, encoded: bytes) -> np.ndarray:
        """A stored ``image`` → ``uint8 [size, size, 3]``, decoded by Pillow as
        ``reader.records`` decodes it."""
        return records.decode_image(encoded, self.manifest["preprocessing"])
