"""Opening an ETL output directory: manifest, shard checks, and what the data holds."""

from __future__ import annotations

import dataclasses
import hashlib
import posixpath
from collections.abc import Mapping
from typing import Any

import numpy as np
import tensorflow as tf

from reader.format import contract
from reader.format.contract import (
    CLASSIFICATION,
    IMAGES,
    MULTI_LABEL,
    REGRESSION,
    TIMESERIES,
    ZSCORE,
    DatasetError,
    check_splits,
)
from reader.tfdata.feature_specs import feature_spec_from_json


@dataclasses.dataclass(frozen=True)
class DatasetInfo:
    """A checked dataset directory and its manifest.

    Attributes:
        data_dir: the ETL output directory.
        manifest: the parsed ``manifest.json`` (see docs/FORMAT.md).
        kind: what the examples hold: ``"images"`` or ``"timeseries"``.
    """

    data_dir: str
    manifest: Mapping[str, Any]
    kind: str

    def __repr__(self) -> str:
        """A short summary, as TFDS prints a ``DatasetInfo`` (the manifest holds the
        rest: ``info.manifest``)."""
        lines = ["DatasetInfo(", f"    name={self.manifest.get('name')!r},",
                 f"    kind={self.kind!r},", f"    task={self.task!r},"]
        if self.has_classes:
            lines.append(f"    num_classes={self.num_classes},")
        if self.target_columns:
            lines.append(f"    target_columns={self.target_columns},")
        lines.append("    features={")
        preprocessing = self.manifest.get("preprocessing", {})
        for name, described in self.manifest["features"].items():
            line = f"        {name!r}: {_describe_feature(described)},"
            if name == contract.IMAGE_KEY and "image_size" in preprocessing:
                size = preprocessing["image_size"]
                line += f"  # {preprocessing.get('image_format')}, {size}x{size}"
            lines.append(line)
        lines += ["    },", "    splits={"]
        splits = self.manifest["splits"]
        order = [*contract.SPLITS, *sorted(set(splits) - set(contract.SPLITS))]
        for split in (split for split in order if split in splits):
            shards = len(splits[split]["shards"])
            lines.append(f"        {split!r}: {splits[split]['num_records']:,} records in "
                         f"{shards} shard{'' if shards == 1 else 's'},")
        lines += ["    },", f"    data_dir={self.data_dir!r},", ")"]
        return "\n".join(lines)

    @property
    def feature_spec(self) -> dict[str, Any]:
        """``tf.io.parse_example`` spec, from the manifest (never typed by hand)."""
        return feature_spec_from_json(self.manifest["features"])

    @property
    def task(self) -> str:
        """``"classification"`` (one int64 ``label``), ``"multi_label"`` (a set of
        label ids), ``"regression"`` (numeric ``target`` only) or ``"forecast"``."""
        return self.manifest.get("task", CLASSIFICATION)

    @property
    def label_vocab(self) -> list[str]:
        """Label names in id order ([] without classes)."""
        return list(self.manifest["label_vocab"])

    @property
    def num_classes(self) -> int:
        """Classes of the label (the multi-hot's width); 0 without classes."""
        return len(self.manifest["label_vocab"]) if self.has_classes else 0

    @property
    def has_classes(self) -> bool:
        """Whether examples have a class label (single or multi-label)."""
        return self.task in (CLASSIFICATION, MULTI_LABEL)

    @property
    def multi_label(self) -> bool:
        """Whether each example has a set of classes (``make_dataset``: multi-hot)."""
        return self.task == MULTI_LABEL

    @property
    def target_columns(self) -> list[str]:
        """Names of the numeric targets stored as ``target`` ``float32 [k]`` (the
        manifest's ``targets``); [] if none. Forecast targets are not listed here."""
        return list(self.manifest.get(contract.TARGETS_ENTRY, {}).get("columns", []))

    @property
    def carried_columns(self) -> list[str]:
        """String columns carried into each example, each a feature of its own."""
        return list(self.manifest.get(contract.CARRIED_COLUMNS_ENTRY, []))

    def denormalize_targets(self, stored: Any) -> np.ndarray:
        """Stored (or predicted) targets ``[..., k]`` → the input's units (float64).

        ``raw = stored * std + mean`` with the manifest's statistics when the targets
        were z-scored; unchanged otherwise.

        Raises:
            ValueError: the dataset has no numeric targets.
        """
        if not self.target_columns:
            raise ValueError(f"{self.data_dir!r} has no numeric targets.")
        targets = self.manifest[contract.TARGETS_ENTRY]
        values = np.asarray(stored, np.float64)
        if targets.get("normalize") != ZSCORE:
            return values
        return (values * np.asarray(targets["std"], np.float64)
                + np.asarray(targets["mean"], np.float64))

    @property
    def column_roles(self) -> Mapping[str, Any] | None:
        """A forecasting dataset's column roles and blocks (``preprocessing.
        column_roles`` in the manifest); None without covariates."""
        return self.manifest.get("preprocessing", {}).get("column_roles")

    @property
    def model_inputs(self) -> list[str] | None:
        """The stored blocks a forecasting model with covariates takes as named
        inputs (``window``, ``known``, ``known_cat``, ``static_cat``, ``static_real``,
        where present); None for datasets without column roles (their input is one
        tensor)."""
        if self.column_roles is None:
            return None
        return [key for key in contract.MODEL_INPUT_KEYS if key in self.feature_spec]

    @property
    def categories(self) -> Mapping[str, Any]:
        """Per categorical column (``--known_categorical_columns``,
        ``--static_categorical_columns``): its ``block``, ``vocabulary`` name,
        vocabulary ``size``, its texts in id order (``values``), ``oov_id`` and
        ``cardinality`` (the ids an embedding takes); empty without categoricals."""
        return self.manifest.get("categories", {})

    def inverse_target(self, target: Any, target_scale: Any) -> np.ndarray:
        """Stored (or predicted) targets ``[..., H, T]`` of a dataset with column
        roles → real units (float64): ``target * scale + centre`` with each example's
        ``target_scale`` ``[..., T, 2]``, then the inverse of the target transform
        (``expm1`` after ``log1p``).

        Raises:
            ValueError: the dataset has no column roles.
        """
        roles = self.column_roles
        if roles is None:
            raise ValueError(f"{self.data_dir!r} has no column roles (no target_scale).")
        scale = np.asarray(target_scale, np.float64)
        values = (np.asarray(target, np.float64) * scale[..., None, :, 1]
                  + scale[..., None, :, 0])
        return np.expm1(values) if roles["target_transform"] == "log1p" else values

    @property
    def preprocessing(self) -> Mapping[str, Any]:
        return self.manifest["preprocessing"]

    def num_records(self, split: str) -> int:
        return int(self._split(split)["num_records"])

    def label_counts(self, split: str) -> dict[str, int]:
        """Examples per label name in ``split``. Multi-label: examples whose set holds
        the name, so the counts may sum to more (or less) than the records."""
        self._split(split)
        return dict(self.manifest["label_counts"].get(split, {}))

    def shard_num_records(self, split: str) -> list[int]:
        """Records in each shard of ``split``, in index order (``shard_paths``')."""
        return [int(shard["num_records"]) for shard in self._split(split)["shards"]]

    def shard_paths(self, split: str) -> list[str]:
        """Absolute shard paths of ``split`` in index order."""
        return [posixpath.join(self.data_dir, shard["path"])
                for shard in self._split(split)["shards"]]

    def _split(self, split: str) -> Mapping[str, Any]:
        check_splits(self.manifest, self.data_dir, [split])
        return self.manifest["splits"][split]


def _describe_feature(described: Mapping[str, Any]) -> str:
    """A manifest feature as ``dtype`` with its shape: ``int64``, ``float32[6, 3]``,
    ``int64[None]`` (var_len)."""
    if described["kind"] == "var_len":
        return f"{described['dtype']}[None]"
    shape = list(described.get("shape", []))
    return described["dtype"] + (f"[{', '.join(map(str, shape))}]" if shape else "")


def _kind_of(manifest: Mapping[str, Any], data_dir: str) -> str:
    features = manifest.get("features", {})
    kind = manifest.get("kind", IMAGES if contract.IMAGE_KEY in features else None)
    if kind in (IMAGES, TIMESERIES):
        return kind
    raise DatasetError(f"{data_dir!r} holds features {sorted(features)}, which this "
                       f"reader version does not know how to decode.")


def check_labels(manifest: Mapping[str, Any], data_dir: str) -> None:
    """Checks that the manifest's task, targets and label features agree.

    Raises:
        DatasetError: an unknown task, or a task whose features are not there.
    """
    task = manifest.get("task", CLASSIFICATION)
    if task not in contract.TASKS:
        raise DatasetError(f"{data_dir!r} has task {task!r}, which this reader version "
                           f"does not know (it reads {', '.join(contract.TASKS)}).")
    features = manifest.get("features", {})
    targets = manifest.get(contract.TARGETS_ENTRY)
    if targets is not None:
        shape = features.get(contract.TARGET_KEY, {}).get("shape")
        if shape != [len(targets["columns"])]:
            raise DatasetError(
                f"{data_dir!r} lists target columns {targets['columns']} but its "
                f"{contract.TARGET_KEY!r} feature has shape {shape}.")
    elif task == REGRESSION:
        raise DatasetError(f"{data_dir!r} is a regression dataset without a "
                           f"{contract.TARGETS_ENTRY!r} entry in its manifest.")
    label_kind = features.get(contract.LABEL_KEY, {}).get("kind")
    if task == MULTI_LABEL and label_kind != "var_len":
        raise DatasetError(f"{data_dir!r} is multi-label but its {contract.LABEL_KEY!r} "
                           f"feature is {label_kind or 'missing'}, not var_len.")


def _read_through_gfile(path: str) -> bytes | None:
    if not tf.io.gfile.exists(path):
        return None
    with tf.io.gfile.GFile(path, "rb") as f:
        return f.read()


def load_manifest(data_dir: str) -> dict[str, Any]:
    """Reads ``<data_dir>/manifest.json`` through ``tf.io.gfile`` (local or remote).

    Raises:
        FileNotFoundError: if there is no manifest, i.e. the job did not finish.
        DatasetError: if the manifest is not a JSON object.
    """
    return contract.load_manifest(data_dir, _read_through_gfile)


def sha256_of_file(path: str, chunk_bytes: int = 1 << 20) -> str:
    """Hex SHA-256 of a file (local or remote, via tf.io.gfile), as the manifest records."""
    digest = hashlib.sha256()
    with tf.io.gfile.GFile(path, "rb") as f:
        while chunk := f.read(chunk_bytes):
            digest.update(chunk)
    return digest.hexdigest()


def check_shards(manifest: Mapping[str, Any], data_dir: str, splits: list[str],
                 verify: bool) -> None:
    """Checks that every listed shard exists with the recorded size (and sha256).

    Raises:
        DatasetError: naming the first missing, resized or altered shard.
    """
    for split in splits:
        for shard in manifest["splits"][split]["shards"]:
            path = posixpath.join(data_dir, shard["path"])
            if not tf.io.gfile.exists(path):
                raise DatasetError(f"Shard {path!r} is listed in the manifest but missing.")
            size = tf.io.gfile.stat(path).length
            if size != shard["num_bytes"]:
                raise DatasetError(
                    f"Shard {path!r} has {size} bytes but the manifest records "
                    f"{shard['num_bytes']}: it was truncated or replaced.")
            if verify and sha256_of_file(path) != shard["sha256"]:
                raise DatasetError(
                    f"Shard {path!r} does not match the sha256 in the manifest: its "
                    f"bytes were altered after the job wrote it.")


def open_dataset(data_dir: str, *, splits: list[str] | None = None,
                 verify: bool = False) -> DatasetInfo:
    """Loads the manifest of ``data_dir`` and checks its shards.

    Args:
        data_dir: an output directory of ``pipelines.images`` (local or ``gs://``).
        splits: splits whose shards to check; all by default ([]: none).
        verify: also compare every shard's sha256 with the manifest (reads all bytes).

    Raises:
        FileNotFoundError: no manifest (the job has not finished).
        DatasetError: a shard is missing, has the wrong size or (``verify``) hash,
            or the format version is newer than this reader.
        ValueError: ``splits`` names a split the dataset does not have.
    """
    manifest = load_manifest(data_dir)
    version = manifest.get("format_version")
    if version != contract.FORMAT_VERSION:
        raise DatasetError(f"{data_dir!r} has format_version {version!r}; this reader "
                           f"reads version {contract.FORMAT_VERSION}.")
    splits = list(manifest["splits"]) if splits is None else splits
    check_splits(manifest, data_dir, splits)
    check_shards(manifest, data_dir, splits, verify)
    check_labels(manifest, data_dir)
    return DatasetInfo(data_dir=data_dir, manifest=manifest, kind=_kind_of(manifest, data_dir))
