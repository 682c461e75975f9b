"""Writes TFDS metadata into a dataset directory, so TFDS reads the shards where they are.

    python -m reader.export_tfds out/images

writes ``dataset_info.json``, ``features.json`` and one ``<feature>.labels.txt`` per
class label into ``out/images`` (nothing else; the manifest and shards stay as they
are, and a rerun overwrites them), after which::

    import tensorflow_datasets as tfds
    from reader.export_tfds import accurate_jpeg_decoders

    builder = tfds.builder_from_directory("out/images")
    train = builder.as_dataset(split="train[:10%]", decoders=accurate_jpeg_decoders())

Only datasets written with ``--compression=none``: TFDS opens TFRecord files without
compression. Every split holds its exact record count (``shard_lengths`` from the
manifest, which TFDS checks while reading), so sub-splits (``train[:10%]``) work.

What TFDS cannot say the way our reader does:

* **Empty splits are left out**: TFDS refuses to read a split with no shard ("corresponds
  to no data"), so ``as_dataset(split="test")`` of a dataset whose test split is empty
  raises TFDS's unknown-split error instead.
* **Appended versions** (``--append``) are one TFDS split each: version 1's train shards
  are ``train``, version N's (``<name>-vN-train-…``) ``train_vN``; all of train is
  ``split="train+train_v2"``. Rerun this export after each append (TFDS reads only the
  shards its metadata lists); TFDS's ``version`` is ``<dataset_version>.0.0``.
* **Label -1** (a class not in the train split) decodes as -1, unchanged, but
  ``ClassLabel.int2str(-1)`` silently returns the *last* class name (Python indexing):
  check ``label >= 0`` before naming it.
* **JPEG pixels**: TFDS's ``Image`` decodes with TensorFlow's fast IDCT, a few levels
  off the accurate IDCT our reader and the stored images use
  (``contract.STORED_JPEG_DCT_METHOD``); pass ``decoders=accurate_jpeg_decoders()``.
* **Raw images** have no TFDS image type: ``image`` is a ``uint8 [size, size, 3]``
  ``Tensor`` whose bytes encoding is exactly our row-major pixel bytes (no decode).
* **Multi-label** ``label`` is a ``Sequence(ClassLabel)``: the id list as stored (ascending,
  -1 first), not the multi-hot ``make_dataset`` gives.
"""

from __future__ import annotations

import dataclasses
import posixpath
import re
import sys
from collections.abc import Mapping
from typing import Any

import tensorflow as tf

from reader.format import contract
from reader.format.contract import DatasetError
from reader.tfdata.dataset_info import DatasetInfo, open_dataset
from reader.tfdata.decoding import decode_stored_image

# What TFDS's DatasetInfo.write_to_directory writes: these two, and the names of each
# ClassLabel feature in "<feature>.labels.txt".
DATASET_INFO_FILENAME = "dataset_info.json"
FEATURES_FILENAME = "features.json"
LABELS_SUFFIX = ".labels.txt"
FILE_FORMAT = "tfrecord"
# TFDS formats "00001-of-00004" with at least 5 digits each, as contract.shard_filename.
_SHARD_SUFFIX = "{SHARD_X_OF_Y}.{FILEFORMAT}"
_IMAGE_ENCODINGS = {contract.JPEG: "jpeg", contract.PNG: "png"}


@dataclasses.dataclass(frozen=True)
class TfdsSplit:
    """One TFDS split: the shards one dataset version wrote for one of our splits.

    Attributes:
        name: the TFDS split name: ``split`` for version 1, ``<split>_v<N>`` after.
        split: our split (the folder the shards lie in).
        version: the dataset version that wrote the shards (from their file names).
        template: TFDS's ``filepath_template``, relative to the data directory.
        shard_lengths: records per shard, in shard index order.
        num_bytes: bytes of the shards.
    """

    name: str
    split: str
    version: int
    template: str
    shard_lengths: tuple[int, ...]
    num_bytes: int

    @property
    def num_records(self) -> int:
        return sum(self.shard_lengths)


@dataclasses.dataclass(frozen=True)
class TfdsExport:
    """What :func:`write_tfds_metadata` wrote.

    Attributes:
        info: the dataset it describes.
        files: names of the files written into ``data_dir``.
        splits: the TFDS splits, in manifest order.
        empty_splits: our splits with no records, which TFDS cannot read (left out).
    """

    info: DatasetInfo
    files: tuple[str, ...]
    splits: tuple[TfdsSplit, ...]
    empty_splits: tuple[str, ...]

    @property
    def data_dir(self) -> str:
        return self.info.data_dir

    @property
    def dataset_info_path(self) -> str:
        return posixpath.join(self.data_dir, DATASET_INFO_FILENAME)


def _tfds() -> Any:
    try:
        # On demand: only this export needs it, and a training install lacks it.
        import tensorflow_datasets as tfds
    except ImportError:
        raise ImportError("reader.export_tfds needs tensorflow-datasets, which a training "
                          "install does not include: pip install tensorflow-datasets"
                          ) from None
    return tfds


def tfds_split_name(split: str, version: int) -> str:
    """The TFDS split of ``split``'s shards written by dataset ``version``."""
    return split if version == 1 else f"{split}_v{version}"


def _escape(text: str) -> str:
    """``text`` as a literal inside a ``str.format`` template (TFDS formats templates)."""
    return text.replace("{", "{{").replace("}", "}}")


def shard_template(name: str, split: str, version: int) -> str:
    """TFDS's ``filepath_template`` for ``split``'s shards of dataset ``version``.

    Literal names rather than TFDS's ``{DATASET}``/``{SPLIT}``: an appended version's
    files carry ``-vN`` and its folder is our split, not its TFDS split's name.
    """
    prefix = name if version == 1 else f"{name}-v{version}"
    return f"{_escape(split)}/{_escape(prefix)}-{_escape(split)}-{_SHARD_SUFFIX}"


def _versions_of(name: str, split: str, shards: list[Mapping[str, Any]]
                 ) -> dict[int, list[Mapping[str, Any]]]:
    """``split``'s shard entries grouped by the dataset version their file name shows."""
    pattern = re.compile(rf"{re.escape(split)}/{re.escape(name)}(?:-v(\d+))?-"
                         rf"{re.escape(split)}-\d{{5,}}-of-\d{{5,}}\.tfrecord")
    by_version: dict[int, list[Mapping[str, Any]]] = {}
    for shard in shards:
        match = pattern.fullmatch(shard["path"])
        if match is None:
            raise DatasetError(
                f"Shard {shard['path']!r} of split {split!r} is not named "
                f"{split}/{name}[-vN]-{split}-SSSSS-of-NNNNN.tfrecord, so TFDS cannot "
                f"find it from a file template: was the dataset renamed by hand?")
        by_version.setdefault(int(match.group(1) or 1), []).append(shard)
    return by_version


def _file_template(data_dir: str, name: str, split: TfdsSplit) -> Any:
    """The ``tfds.core.ShardedFileTemplate`` that opens ``split``'s shards."""
    return _tfds().core.ShardedFileTemplate(
        data_dir=data_dir, template=split.template, dataset_name=name, split=split.name,
        filetype_suffix=FILE_FORMAT)


def _tfds_split(data_dir: str, name: str, split: str, version: int,
                shards: list[Mapping[str, Any]]) -> TfdsSplit:
    """The TFDS split of ``shards`` (``split``'s of dataset ``version``), checked
    against the file names TFDS's template generates for them."""
    found = TfdsSplit(name=tfds_split_name(split, version), split=split, version=version,
                      template=shard_template(name, split, version), shard_lengths=(),
                      num_bytes=sum(int(shard["num_bytes"]) for shard in shards))
    opens = _file_template(data_dir, name, found)
    expected = [opens.relative_filepath(shard_index=i, num_shards=len(shards))
                for i in range(len(shards))]
    by_path = {shard["path"]: shard for shard in shards}
    if sorted(by_path) != sorted(expected):
        raise DatasetError(
            f"Version {version} of split {split!r} lists shards {sorted(by_path)}, but "
            f"TFDS's template {found.template!r} opens {expected}: shard indices must "
            f"run 0..{len(shards) - 1} of {len(shards)}.")
    # TFDS checks shard i's record count while reading it: counts in index order.
    return dataclasses.replace(
        found, shard_lengths=tuple(int(by_path[path]["num_records"]) for path in expected))


def tfds_splits(info: DatasetInfo) -> list[TfdsSplit]:
    """The TFDS splits of a dataset: one per split and dataset version with records.

    Raises:
        DatasetError: a shard name that no TFDS file template produces.
    """
    name = info.manifest["name"]
    found = []
    for split in contract.ordered_splits(info.manifest["splits"]):
        shards = info.manifest["splits"][split]["shards"]
        for version, written in sorted(_versions_of(name, split, shards).items()):
            found.append(_tfds_split(info.data_dir, name, split, version, written))
    return found


def _class_label(info: DatasetInfo) -> Any:
    names = info.label_vocab
    if any("\n" in label or "\r" in label for label in names):
        raise DatasetError(f"{info.data_dir!r} has a class name with a line break, which "
                           f"TFDS's one-name-a-line {LABELS_SUFFIX} file cannot hold.")
    return _tfds().features.ClassLabel(names=names)


def _image_feature(info: DatasetInfo) -> Any:
    tfds = _tfds()
    size = int(info.preprocessing["image_size"])
    image_format = info.preprocessing["image_format"]
    if image_format == contract.RAW:
        # TFDS's bytes encoding of a Tensor is its row-major bytes: our raw format.
        return tfds.features.Tensor(shape=(size, size, 3), dtype=tf.uint8,
                                    encoding=tfds.features.Encoding.BYTES)
    if image_format not in _IMAGE_ENCODINGS:
        raise DatasetError(f"{info.data_dir!r} stores images as {image_format!r}; TFDS "
                           f"export knows {', '.join(contract.IMAGE_FORMATS)}.")
    return tfds.features.Image(shape=(size, size, 3),
                               encoding_format=_IMAGE_ENCODINGS[image_format])


def _generic_feature(spec: Mapping[str, Any]) -> Any:
    """The TFDS feature that parses a manifest feature spec as ``tf.io`` would."""
    features = _tfds().features
    dtype, shape = tf.as_dtype(spec["dtype"]), tuple(spec.get("shape", ()))
    if spec["kind"] == "var_len":
        return features.Sequence(features.Text() if dtype == tf.string
                                 else features.Tensor(shape=(), dtype=dtype))
    if dtype == tf.string and not shape:
        return features.Text()
    return features.Tensor(shape=shape, dtype=dtype)


def tfds_features(info: DatasetInfo) -> Any:
    """``tfds.features.FeaturesDict`` of every feature the manifest lists.

    ``image``: ``Image`` (JPEG/PNG) or a ``uint8`` ``Tensor`` (raw); ``label`` of a
    dataset with classes: ``ClassLabel`` over ``label_vocab`` (multi-label: a
    ``Sequence`` of it); strings: ``Text`` (var_len: ``Sequence(Text)``); numbers:
    ``Tensor`` of the manifest's shape and dtype.
    """
    mapped = {}
    for name, spec in info.manifest["features"].items():
        if name == contract.IMAGE_KEY and info.kind == contract.IMAGES:
            mapped[name] = _image_feature(info)
        elif name == contract.LABEL_KEY and info.has_classes:
            label = _class_label(info)
            mapped[name] = _tfds().features.Sequence(label) if info.multi_label else label
        else:
            mapped[name] = _generic_feature(spec)
    return _tfds().features.FeaturesDict(mapped)


def _supervised_keys(info: DatasetInfo) -> tuple[str, str] | None:
    """(input, target) for ``as_supervised=True``; None where the model takes several
    inputs (forecasting covariates) or there is no single target."""
    features = info.manifest["features"]
    inputs = contract.IMAGE_KEY if info.kind == contract.IMAGES else contract.WINDOW_KEY
    target = contract.LABEL_KEY if info.has_classes else contract.TARGET_KEY
    if inputs not in features or target not in features or (
            info.kind == contract.TIMESERIES and info.model_inputs is not None):
        return None
    return inputs, target


def _description(info: DatasetInfo) -> str:
    manifest = info.manifest
    return (f"{manifest['name']}: {info.kind}, task {info.task}, dataset version "
            f"{manifest.get('dataset_version', 1)}; TFDS metadata written by "
            f"reader.export_tfds from {contract.MANIFEST_FILENAME} (docs/FORMAT.md).")


def _split_dict(data_dir: str, name: str, splits: list[TfdsSplit]) -> Any:
    core = _tfds().core
    return core.SplitDict([
        core.SplitInfo(name=split.name, shard_lengths=list(split.shard_lengths),
                       num_bytes=split.num_bytes,
                       filename_template=_file_template(data_dir, name, split))
        for split in splits])


def write_tfds_metadata(data_dir: str) -> TfdsExport:
    """Writes TFDS's metadata for the dataset at ``data_dir`` into it (see the module).

    Raises:
        FileNotFoundError: no manifest (the job did not finish).
        DatasetError: GZIP shards, a missing or resized shard, or shards TFDS cannot
            name (see :func:`tfds_splits`).
        ImportError: tensorflow-datasets is not installed.
    """
    tfds = _tfds()
    info = open_dataset(data_dir)
    if contract.compression_of(info.manifest) != contract.NO_COMPRESSION:
        raise DatasetError(
            f"{data_dir!r} has GZIP-compressed shards, which TFDS cannot read (it opens "
            f"TFRecord files uncompressed): rebuild it with --compression=none.")
    name = info.manifest["name"]
    splits = tfds_splits(info)
    features = tfds_features(info)
    identity = tfds.core.DatasetIdentity(
        name=name, data_dir=data_dir, module_name="",
        version=tfds.core.Version(f"{info.manifest.get('dataset_version', 1)}.0.0"))
    tfds_info = tfds.core.DatasetInfo(builder=identity, features=features,
                                      description=_description(info),
                                      supervised_keys=_supervised_keys(info))
    tfds_info.set_file_format(FILE_FORMAT)
    tfds_info.set_splits(_split_dict(data_dir, name, splits))
    tfds_info.write_to_directory(data_dir)
    labels = (f"{contract.LABEL_KEY}{LABELS_SUFFIX}",) if info.has_classes else ()
    return TfdsExport(info=info, files=(DATASET_INFO_FILENAME, FEATURES_FILENAME, *labels),
                      splits=tuple(splits),
                      empty_splits=tuple(
                          split for split in contract.ordered_splits(info.manifest["splits"])
                          if not info.manifest["splits"][split]["shards"]))


def export_tfds(data_dir: str) -> str:
    """Writes TFDS's metadata into ``data_dir``; returns the path of its
    ``dataset_info.json``. Raises as :func:`write_tfds_metadata`."""
    return write_tfds_metadata(data_dir).dataset_info_path


def accurate_jpeg_decoders() -> dict[str, Any]:
    """``as_dataset``'s ``decoders`` that decode stored JPEGs as our reader does.

    TFDS's ``Image`` uses TensorFlow's fast IDCT, a few levels off the stored pixels;
    this decodes ``image`` with ``reader.tfdata.decoding.decode_stored_image`` (the
    accurate IDCT). For JPEG datasets only (PNG and raw images already decode exactly).

        builder.as_dataset(split="train", decoders=accurate_jpeg_decoders())
    """
    tfds = _tfds()

    @tfds.decode.make_decoder()
    def accurate_jpeg(serialized: Any, feature: Any) -> Any:
        return decode_stored_image(serialized, contract.JPEG, feature.shape[0])

    return {contract.IMAGE_KEY: accurate_jpeg()}


def describe(export: TfdsExport) -> str:
    """One line: what was written and how to load it, with what TFDS reads differently."""
    info = export.info
    counts = ", ".join(f"{s.name} ({s.num_records})" for s in export.splits)
    parts = [(f"Wrote TFDS metadata ({', '.join(export.files)}) into {export.data_dir}: "
              f"tfds.builder_from_directory({export.data_dir!r}).as_dataset(split=...) "
              f"reads splits {counts}")]
    for split in dict.fromkeys(s.split for s in export.splits if s.version > 1):
        names = "+".join(s.name for s in export.splits if s.split == split)
        parts.append(f"{split} spans dataset versions: read all of it as split={names!r}")
    if export.empty_splits:
        parts.append(f"empty splits left out (TFDS cannot read one): "
                     f"{', '.join(export.empty_splits)}")
    image_format = (info.preprocessing.get("image_format")
                    if info.kind == contract.IMAGES else None)
    if image_format == contract.JPEG:
        parts.append("pass decoders=reader.export_tfds.accurate_jpeg_decoders() for the "
                     "reader's JPEG pixels (TFDS's default IDCT is a few levels off)")
    elif image_format == contract.RAW:
        parts.append("raw images are a uint8 Tensor (TFDS has no raw image type)")
    if info.has_classes:
        parts.append("label -1 (a class not in train) stays -1, but "
                     "ClassLabel.int2str(-1) names the last class")
    return "; ".join(parts) + "."


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m reader.export_tfds <data_dir>", file=sys.stderr)
        return 2
    try:
        export = write_tfds_metadata(args[0])
    except (FileNotFoundError, ImportError, ValueError) as e:  # DatasetError included.
        print(f"ERROR: {e}", file=sys.stderr)
        return 2
    print(describe(export))
    return 0


if __name__ == "__main__":
    sys.exit(main())
