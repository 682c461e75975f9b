"""Dataset versions: what each run added, the keys it accounted for, and the merge.

A finished dataset is version 1. ``--append`` publishes version 2, 3, ...: its new
shards sit beside the old ones under names of their own, its dead letters in a file
of their own, and its manifest lists every shard of every version, the summed
counts, and a ``history`` entry per version (what it added, where its keys and dead
letters are). Old shard files are never rewritten, and the old manifest stays the
published one until the new one replaces it whole (a rename on a disk, one upload
on an object store).

Each version writes its *key index*, ``keys/keys-vNNNNN.txt``: every key it accounted
for (written or rejected), one JSON string a line, sorted. An append reads the
indexes to skip the inputs the dataset already holds without opening a shard.
"""

from __future__ import annotations

import dataclasses
import json
import posixpath
from collections.abc import Iterable, Mapping
from typing import Any

import apache_beam as beam

from etl.core import singletons
from etl.core.dead_letters import EXAMPLES_PER_REASON, METRICS_NAMESPACE
from etl.core.io import storage
from reader.format import contract

KEYS_DIRNAME = "keys"
# Beam counter (namespace "etl") of listed inputs an earlier version accounted for.
HELD_COUNTER = "inputs_already_held"
# Options an append may change: they decide how the new shards are cut and whether
# they are published, not what an example holds.
FREE_WHEN_APPENDING = frozenset(
    {"num_shards", "target_shard_bytes", "gzip_level", "max_error_fraction",
     "cross_split_duplicates", "near_duplicate_distance", "statistics"})
# Manifest entries an appended version computes again: they replace the previous
# version's (the image job's duplicate report, over the whole dataset; the
# statistics of the version's own data, which say where its files are).
RECOMPUTED_WHEN_APPENDING = ("duplicates", "statistics")


def key_index_relpath(version: int) -> str:
    return f"{KEYS_DIRNAME}/keys-v{version:05d}.txt"


def hashes_relpath(version: int) -> str:
    """The image signatures of a version's stored images, beside its key index."""
    return f"{KEYS_DIRNAME}/hashes-v{version:05d}.jsonl"


def rejected_relpath(version: int) -> str:
    """Version 1's dead letters are ``errors/rejected.jsonl``, as in any dataset."""
    suffix = "" if version == 1 else f"-v{version:05d}"
    stem, ext = posixpath.splitext(contract.REJECTED_FILENAME)
    return f"{contract.ERRORS_DIRNAME}/{stem}{suffix}{ext}"


def shard_prefix(name: str, version: int) -> str:
    """The shard file prefix of a version's shards: ``name``, then ``name-vN``."""
    return name if version == 1 else f"{name}-v{version}"


@dataclasses.dataclass(frozen=True)
class DatasetVersion:
    """The version a run publishes, and the manifest it appends to (None: version 1)."""

    number: int = 1
    previous: Mapping[str, Any] | None = None

    @classmethod
    def after(cls, manifest: Mapping[str, Any]) -> DatasetVersion:
        return cls(int(manifest.get("dataset_version", 1)) + 1, manifest)

    @classmethod
    def appending_to(cls, output_dir: str, kind: str, name: str,
                     preprocessing: Mapping[str, Any]) -> DatasetVersion:
        """The next version of the finished dataset in ``output_dir``, checked to be
        one this run can add to: same kind and name, and the same options for
        everything that shapes an example (sharding and the error threshold may
        differ; they apply to the new shards).

        Raises:
            ValueError: naming what differs, or that there is no finished dataset.
        """
        path = storage.join(output_dir, contract.MANIFEST_FILENAME)
        if not storage.exists(path):
            raise ValueError(f"--append adds to a finished dataset, and {output_dir!r} "
                             f"holds none ({contract.MANIFEST_FILENAME} is missing); run "
                             f"without --append first.")
        manifest = read_manifest(output_dir)
        if manifest["kind"] != kind or manifest["name"] != name:
            raise ValueError(f"--append: {output_dir!r} holds the {manifest['kind']} "
                             f"dataset {manifest['name']!r}, not {kind} {name!r}.")
        for key in sorted(set(manifest["preprocessing"]) | set(preprocessing)):
            if key in FREE_WHEN_APPENDING:
                continue
            then, now = manifest["preprocessing"].get(key), preprocessing.get(key)
            if key == "compression":  # Datasets from before --compression are GZIP.
                then = then or contract.GZIP
            if key == "labels" and then and "class_order" not in then:
                # Datasets from before --class_order numbered classes by frequency.
                then = {**then, "class_order": None if then.get("label_column") is None
                        else contract.CLASS_ORDER_FREQUENCY}
            if json.loads(json.dumps(now)) != then:
                raise ValueError(
                    f"--append must preprocess like the dataset: its {key} is "
                    f"{json.dumps(then)}, this run's {json.dumps(now)}. Use the "
                    f"dataset's options, or rebuild it with --overwrite.")
        version = cls.after(manifest)
        version.held_key_files()
        return version

    @property
    def appends(self) -> bool:
        return self.previous is not None

    def published_shards(self) -> frozenset[str]:
        """The shard files, and record indexes, of the version appended to (none for
        a first version)."""
        splits = (self.previous or {}).get("splits", {})
        shards = [shard for entry in splits.values() for shard in entry["shards"]]
        return frozenset([shard["path"] for shard in shards]
                         + [shard["index"]["path"] for shard in shards if "index" in shard])

    def held_key_files(self) -> list[str]:
        """The key indexes of the versions already published (relative paths).

        Raises:
            ValueError: if the dataset has no key index (written before versions).
        """
        if self.previous is None:
            return []
        history = self.previous.get("history")
        if not history:
            raise ValueError("This dataset has no key index (it was written before "
                             "--append existed); rebuild it once with --overwrite.")
        return [entry["keys"] for entry in history if entry.get("keys")]


# A dataset's first version: what every run but an append publishes.
FIRST_VERSION = DatasetVersion()


def history_entry(version: int, manifest: Mapping[str, Any], keys: str | None,
                  rejected: str | None) -> dict[str, Any]:
    """What ``manifest`` (one version's content alone) added."""
    return {
        "version": version,
        "inputs": manifest["inputs"],
        "written": {split: manifest["splits"][split]["num_records"]
                    for split in contract.SPLITS},
        "rejected": manifest["rejected"]["count"],
        "shards": [shard["path"] for split in contract.SPLITS
                   for shard in manifest["splits"][split]["shards"]],
        "keys": keys,
        "rejected_file": rejected,
    }


def _merge_rejected(old: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any]:
    reasons = sorted(set(old["by_reason"]) | set(new["by_reason"]))
    examples = {}
    for reason in reasons:
        both = [*old["examples"].get(reason, ()), *new["examples"].get(reason, ())]
        examples[reason] = sorted(both, key=lambda e: (e["key"], e["message"]))[
            :EXAMPLES_PER_REASON]
    return {"count": old["count"] + new["count"],
            "by_reason": {r: old["by_reason"].get(r, 0) + new["by_reason"].get(r, 0)
                          for r in reasons},
            "examples": examples}


def merge(previous: Mapping[str, Any], added: Mapping[str, Any]) -> dict[str, Any]:
    """The manifest of ``previous`` with the version ``added`` describes appended:
    its shards after the old ones, every count summed, its history entry last;
    everything else (features, vocabulary, preprocessing, statistics) stays the
    previous version's, which the added shards were transformed with.

    Raises:
        ValueError: if the added version's features differ from the dataset's.
    """
    if added["features"] != previous["features"]:
        raise ValueError("The appended examples' features differ from the dataset's.")
    merged = json.loads(json.dumps(previous))
    for split in contract.SPLITS:
        entry, more = merged["splits"][split], added["splits"][split]
        entry["num_records"] += more["num_records"]
        entry["num_bytes"] += more["num_bytes"]
        entry["shards"] += more["shards"]
        counts = merged["label_counts"][split]
        for label, count in added["label_counts"][split].items():
            counts[label] = counts.get(label, 0) + count
        merged["label_counts"][split] = dict(sorted(counts.items()))
    merged["inputs"] = previous["inputs"] + added["inputs"]
    merged["rejected"] = _merge_rejected(previous["rejected"], added["rejected"])
    merged["versions"] = added["versions"]
    merged["dataset_version"] = added["dataset_version"]
    merged["history"] = [*previous["history"], *added["history"]]
    for name in RECOMPUTED_WHEN_APPENDING:
        if name in added:
            merged[name] = added[name]
    return merged


def _keys_text(keys: Iterable[str]) -> str:
    return "".join(json.dumps(key, ensure_ascii=False) + "\n" for key in sorted(keys))


def _read_if_there(path: str) -> bytes | None:
    return storage.read_bytes(path) if storage.exists(path) else None


def read_manifest(output_dir: str) -> dict[str, Any]:
    """The published manifest of ``output_dir``, read through ``etl.core.io.storage``.

    Raises:
        FileNotFoundError: if there is none.
        contract.DatasetError: if it is not a JSON object.
    """
    return contract.load_manifest(output_dir, _read_if_there)


def read_key_index(path: str) -> set[str]:
    return {json.loads(line) for line in storage.read_text(path).splitlines()
            if line.strip()}


def _write_key_index(keys: list[str], path: str) -> str | None:
    if not keys:
        return None
    # A key may be both written and rejected (a duplicate removed after its shard).
    storage.write_text(path, _keys_text(set(keys)))
    return path


class WriteKeyIndex(beam.PTransform):
    """Keys (str) → the version's key index, sorted; a single element: its path
    (None when there is no key, and then no file)."""

    def __init__(self, output_dir: str, version: int) -> None:
        super().__init__()
        self._path = posixpath.join(output_dir, key_index_relpath(version))

    def expand(self, keys: beam.PCollection) -> beam.PCollection:
        return keys.pipeline | "WriteKeys" >> singletons.Once(
            _write_key_index, keys=beam.pvalue.AsList(keys), path=self._path)


class DropHeldInputs(beam.DoFn):
    """Records and rejections whose key an earlier version accounted for are dropped
    (counted as ``inputs_already_held``); the rest pass. The key indexes are read
    once per worker."""

    def __init__(self, key_files: list[str]) -> None:
        self._key_files = list(key_files)
        self._held: set[str] | None = None

    def setup(self) -> None:
        self._held = set()
        for path in self._key_files:
            self._held |= read_key_index(path)
        self._counter = beam.metrics.Metrics.counter(METRICS_NAMESPACE, HELD_COUNTER)

    def process(self, item: Any) -> Iterable[Any]:
        assert self._held is not None
        if item.key in self._held:
            self._counter.inc()
            return
        yield item
