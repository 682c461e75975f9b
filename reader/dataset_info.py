"""Opening an ETL output directory: manifest, shard checks, and what the data holds."""

from __future__ import annotations

import dataclasses
import posixpath
from collections.abc import Mapping
from typing import Any

import tensorflow as tf

from reader import contract
from reader.contract import CLASSIFICATION, IMAGES, TIMESERIES


class DatasetError(ValueError):
    """The directory is not a complete, intact dataset (the message names the file)."""


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

    @property
    def feature_spec(self) -> dict[str, Any]:
        """``tf.io.parse_example`` spec, from the manifest (never typed by hand)."""
        return contract.feature_spec_from_json(self.manifest["features"])

    @property
    def task(self) -> str:
        """``"classification"`` (int64 ``label``) or ``"forecast"`` (float ``target``)."""
        return self.manifest.get("task", CLASSIFICATION)

    @property
    def label_vocab(self) -> list[str]:
        """Label names in id order."""
        return list(self.manifest["label_vocab"])

    @property
    def preprocessing(self) -> Mapping[str, Any]:
        return self.manifest["preprocessing"]

    def num_records(self, split: str) -> int:
        return int(self._split(split)["num_records"])

    def label_counts(self, split: str) -> dict[str, int]:
        """Examples per label name in ``split``."""
        self._split(split)
        return dict(self.manifest["label_counts"].get(split, {}))

    def shard_paths(self, split: str) -> list[str]:
        """Absolute shard paths of ``split`` in index order."""
        return [posixpath.join(self.data_dir, shard["path"])
                for shard in self._split(split)["shards"]]

    def _split(self, split: str) -> Mapping[str, Any]:
        try:
            return self.manifest["splits"][split]
        except KeyError:
            raise ValueError(f"Unknown split {split!r}; {self.data_dir!r} has "
                             f"{sorted(self.manifest['splits'])}.") from None


def _kind_of(manifest: Mapping[str, Any], data_dir: str) -> str:
    features = manifest.get("features", {})
    kind = manifest.get("kind", IMAGES if contract.IMAGE_KEY in features else None)
    if kind in (IMAGES, TIMESERIES):
        return kind
    raise DatasetError(f"{data_dir!r} holds features {sorted(features)}, which this "
                       f"reader version does not know how to decode.")


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
            if verify and contract.sha256_of_file(path) != shard["sha256"]:
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
    """
    manifest = contract.load_manifest(data_dir)
    version = manifest.get("format_version")
    if version != contract.FORMAT_VERSION:
        raise DatasetError(f"{data_dir!r} has format_version {version!r}; this reader "
                           f"reads version {contract.FORMAT_VERSION}.")
    check_shards(manifest, data_dir, list(manifest["splits"]) if splits is None else splits,
                 verify)
    return DatasetInfo(data_dir=data_dir, manifest=manifest, kind=_kind_of(manifest, data_dir))
