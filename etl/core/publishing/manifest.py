"""The dataset manifest: built from the job's side outputs and written last.

``manifest.json`` is the commit point of an output directory: it is written only
after every shard, the rejected-records file and the tf.Transform output are final
(Beam runs this step only once all of its side inputs are complete), and readers
treat a directory without it as unfinished.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import apache_beam as beam

from etl.core import singletons
from etl.core.io import storage
from etl.core.publishing import accounting
from etl.core.run import fault_injection, versions
from etl.core.run.fingerprint import library_versions
from etl.core.shards.placement import ShardEntry
from reader.format import contract
from reader.format.contract import CLASSIFICATION, MULTI_LABEL

# Called with the finished manifest dict; raises to stop it from being published.
ManifestCheck = Callable[[Mapping[str, Any]], None]

# Why a dataset's train split can be empty, when the job's own check does not say.
EMPTY_TRAIN = "no example was written to it, so tf.Transform's analyzers had nothing to fit on"


@dataclasses.dataclass(frozen=True)
class ManifestSpec:
    """What the manifest says about the job, besides what the tail measures.

    ``kind`` says what an example holds (``"images"``, ``"timeseries"``), ``task``
    what its target is (``"classification"`` or ``"multi_label"``: a label
    vocabulary exists; ``"regression"``, ``"forecast"``); ``preprocessing`` is every
    preprocessing parameter, recorded verbatim. ``check`` (a module-level function of
    the finished manifest dict) raises an ``accounting.WithheldError`` to withhold
    it; without one, only an empty train split does. Extra top-level entries come
    from the job's ``extras`` PCollections (``WriteManifest``).
    """

    kind: str
    task: str
    preprocessing: Mapping[str, Any]
    check: ManifestCheck | None = None


@dataclasses.dataclass(frozen=True)
class ManifestContent:
    """What ``manifest.json`` holds (docs/FORMAT.md for every field).

    ``extra`` adds kind-specific top-level entries (e.g. ``"timeseries"``).
    """

    name: str
    kind: str
    task: str
    shards: Iterable[ShardEntry]
    label_counts: Iterable[tuple[tuple[str, str], int]]
    rejected: Mapping[str, Any]
    features: Mapping[str, Any]
    label_vocab: Sequence[str]
    preprocessing: Mapping[str, Any]
    versions: Mapping[str, str]
    extra: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """The manifest as written: every split of ``contract.SPLITS`` is present,
        with ``num_records`` 0 and no shards when it is empty; shards are listed in
        index order.

        Raises:
            ValueError: if an extra entry has the name of a standard one.
        """
        shards = list(self.shards)
        split_entries: dict[str, dict[str, Any]] = {}
        for split in contract.SPLITS:
            entries = sorted((s for s in shards if s.split == split), key=lambda s: s.index)
            split_entries[split] = {
                "num_records": sum(s.num_records for s in entries),
                "num_bytes": sum(s.num_bytes for s in entries),
                "shards": [s.file_fields() for s in entries],
            }
        counts: dict[str, dict[str, int]] = {split: {} for split in contract.SPLITS}
        for (split, label), count in self.label_counts:
            counts[split][label] = counts[split].get(label, 0) + count
        manifest = {
            "format_version": contract.FORMAT_VERSION,
            "name": self.name,
            "kind": self.kind,
            "task": self.task,
            "splits": split_entries,
            "features": dict(self.features),
            "label_vocab": list(self.label_vocab),
            "label_counts": {split: dict(sorted(c.items())) for split, c in counts.items()},
            "preprocessing": dict(self.preprocessing),
            "compression": contract.compression_of(self.preprocessing),
            "transform_output": {
                "transform_fn": contract.TRANSFORM_FN_DIRNAME,
                "transformed_metadata": contract.TRANSFORMED_METADATA_DIRNAME,
            },
            "versions": dict(self.versions),
            "rejected": dict(self.rejected),
        }
        clashes = sorted(set(self.extra) & set(manifest))
        if clashes:
            raise ValueError(f"Extra manifest entries {clashes} would overwrite standard "
                             f"ones.")
        return {**manifest, **self.extra}


def require_train(manifest: Mapping[str, Any]) -> None:
    """The check of a job that gives none: the train split holds a record.

    Raises:
        accounting.EmptyTrainSplitError: if it holds none.
    """
    accounting.check_train_split(manifest, EMPTY_TRAIN)


def _read_transform_output(transform_dir: str, task: str
                           ) -> tuple[dict[str, Any], list[str]]:
    """(feature spec as JSON, label vocabulary) of the transform output TensorFlow
    reads in ``transform_dir``."""
    import tensorflow_transform as tft

    from reader.tfdata.feature_specs import feature_spec_to_json

    transform_output = tft.TFTransformOutput(transform_dir)
    features = feature_spec_to_json(transform_output.transformed_feature_spec())
    vocab = [] if task not in (CLASSIFICATION, MULTI_LABEL) else [
        token.decode("utf-8") if isinstance(token, bytes) else str(token)
        for token in transform_output.vocabulary_by_name(contract.LABEL_VOCABULARY_NAME)
    ]
    return features, vocab


def _merge_extras(extras: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    merged: dict[str, Any] = {}
    for entry in sorted(extras, key=lambda e: sorted(e)):
        clashes = sorted(set(entry) & set(merged))
        if clashes:
            raise ValueError(f"Two extra manifest entries named {clashes}.")
        merged.update(entry)
    return merged


def _write_manifest(*, output_dir: str, name: str, spec: ManifestSpec,
                    version: versions.DatasetVersion, shards: list[ShardEntry],
                    label_counts: list[tuple[tuple[str, str], int]],
                    rejected: dict[str, Any], transform_dir: str,
                    keys_written: list[str | None],
                    extras: list[Mapping[str, Any]]) -> str | None:
    """Writes the manifest; returns its path, or None for an append that added
    nothing (the published manifest is left as it was)."""
    features, vocab = _read_transform_output(transform_dir, spec.task)
    extra = _merge_extras(extras)
    manifest = ManifestContent(
        name=name, kind=spec.kind, task=spec.task, shards=shards,
        label_counts=label_counts, rejected=rejected, features=features,
        label_vocab=vocab, preprocessing=spec.preprocessing,
        versions=library_versions(), extra=extra).to_dict()
    rejected_file = versions.rejected_relpath(version.number)
    manifest["dataset_version"] = version.number
    manifest["history"] = [versions.history_entry(
        version.number, manifest,
        keys=versions.key_index_relpath(version.number) if any(keys_written) else None,
        rejected=rejected_file if rejected["count"] or not version.appends else None)]
    if version.previous is not None:
        if manifest["inputs"] == 0:
            return None
        manifest = versions.merge(version.previous, manifest)
    try:
        # Raises to withhold the manifest (accounting, error rate, empty train).
        (spec.check or require_train)(manifest)
    except accounting.WithheldError as e:
        accounting.write_failure(output_dir, e)
        raise
    path = storage.join(output_dir, contract.MANIFEST_FILENAME)
    fault_injection.pause_point(fault_injection.MANIFEST_WRITING)
    storage.write_text(path, contract.dumps_manifest(manifest))
    return path


class WriteManifest(beam.PTransform):
    """``(shards, label_counts, rejected)`` → the path of ``manifest.json``, written
    once every input is complete.

    The input holds the ``ShardEntry``s of ``FinalizeShards``, the
    ``((split, label_name), count)`` pairs, and the single summary of
    ``WriteRejections``. ``transform_dir`` holds the folder TensorFlow reads the
    transform output from (``etl.core.transform.analysis``), once it is final; ``extras``
    are single-element PCollections of extra top-level entries (dicts).
    """

    def __init__(self, output_dir: str, name: str, spec: ManifestSpec, *,
                 transform_dir: beam.PCollection,
                 keys_written: beam.PCollection | None = None,
                 extras: Sequence[beam.PCollection] = (),
                 version: versions.DatasetVersion = versions.FIRST_VERSION) -> None:
        super().__init__()
        self._write = functools.partial(_write_manifest, output_dir=output_dir, name=name,
                                        spec=spec, version=version)
        self._transform_dir = transform_dir
        self._keys_written = keys_written
        self._extras = tuple(extras)

    def expand(self, measured: tuple[beam.PCollection, beam.PCollection, beam.PCollection]
               ) -> beam.PCollection:
        shards, label_counts, rejected = measured
        extras: Any = []
        if self._extras:
            extras = beam.pvalue.AsList(self._extras | "FlattenExtras" >> beam.Flatten())
        return shards.pipeline | "WriteManifestFile" >> singletons.Once(
            self._write, shards=beam.pvalue.AsList(shards),
            label_counts=beam.pvalue.AsList(label_counts),
            rejected=beam.pvalue.AsSingleton(rejected),
            transform_dir=beam.pvalue.AsSingleton(self._transform_dir),
            keys_written=(beam.pvalue.AsList(self._keys_written)
                          if self._keys_written is not None else []),
            extras=extras)
