"""The dataset manifest: built from the job's side outputs and written last.

``manifest.json`` is the commit point of an output directory: it is written only
after every shard, the rejected-records file and the tf.Transform output are final
(Beam runs this step only once all of its side inputs are complete), and readers
treat a directory without it as unfinished.
"""

from __future__ import annotations

import os
import platform
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import apache_beam as beam

from etl.core import accounting, fault_injection
from etl.core.accounting import EmptyTrainSplitError
from etl.core.atomic_files import write_text_atomically
from reader import contract
from reader.contract import CLASSIFICATION


def library_versions() -> dict[str, str]:
    """Versions of the libraries whose behaviour shapes the output bytes."""
    import tensorflow as tf
    import tensorflow_transform as tft

    return {
        "python": platform.python_version(),
        "tensorflow": tf.__version__,
        "tensorflow_transform": tft.__version__,
        "apache_beam": beam.__version__,
    }


def build_manifest(
    *,
    name: str,
    kind: str,
    task: str,
    shards: Iterable[Mapping[str, Any]],
    label_counts: Iterable[tuple[tuple[str, str], int]],
    rejected: Mapping[str, Any],
    features: Mapping[str, Any],
    label_vocab: list[str],
    preprocessing: Mapping[str, Any],
    versions: Mapping[str, str],
    extra: Mapping[str, Any] | None = None,
    require_train: bool = True,
) -> dict[str, Any]:
    """Assembles the manifest dict (see docs/FORMAT.md for every field).

    ``kind`` says what an example holds (``"images"``, ``"timeseries"``), ``task``
    what its target is (``"classification"``, ``"forecast"``); ``extra`` adds
    kind-specific top-level entries (e.g. ``"timeseries"``).

    Every split of ``contract.SPLITS`` is present, with ``num_records`` 0 and no
    shards when it is empty; shards are listed in index order.

    Raises:
        EmptyTrainSplitError: if no record landed in the train split (unless
            ``require_train`` is False: a job's check then says why, in its terms).
    """
    shards = list(shards)
    if require_train and not any(s["split"] == contract.TRAIN for s in shards):
        raise EmptyTrainSplitError(
            f"The train split is empty: {accounting.IMAGES_EMPTY_TRAIN}. No manifest "
            f"was published.")
    split_entries: dict[str, dict[str, Any]] = {}
    for split in contract.SPLITS:
        entries = sorted((s for s in shards if s["split"] == split),
                         key=lambda s: s["index"])
        split_entries[split] = {
            "num_records": sum(s["num_records"] for s in entries),
            "num_bytes": sum(s["num_bytes"] for s in entries),
            "shards": [
                {k: s[k] for k in ("path", "num_records", "num_bytes", "sha256")}
                for s in entries
            ],
        }
    counts: dict[str, dict[str, int]] = {split: {} for split in contract.SPLITS}
    for (split, label), count in label_counts:
        counts[split][label] = counts[split].get(label, 0) + count
    manifest = {
        "format_version": contract.FORMAT_VERSION,
        "name": name,
        "kind": kind,
        "task": task,
        "splits": split_entries,
        "features": dict(features),
        "label_vocab": list(label_vocab),
        "label_counts": {split: dict(sorted(c.items())) for split, c in counts.items()},
        "preprocessing": dict(preprocessing),
        "transform_output": {
            "transform_fn": contract.TRANSFORM_FN_DIRNAME,
            "transformed_metadata": contract.TRANSFORMED_METADATA_DIRNAME,
        },
        "versions": dict(versions),
        "rejected": dict(rejected),
    }
    clashes = sorted(set(extra or {}) & set(manifest))
    if clashes:
        raise ValueError(f"Extra manifest entries {clashes} would overwrite standard ones.")
    return {**manifest, **(extra or {})}


# Called with the written tft.TFTransformOutput; returns extra manifest entries.
TransformDescriber = Callable[[Any], Mapping[str, Any]]
# Called with the finished manifest dict; raises to stop it from being published.
ManifestCheck = Callable[[Mapping[str, Any]], None]


def _read_transform_output(output_dir: str, task: str) -> tuple[dict[str, Any], list[str],
                                                                 Any]:
    """(feature spec as JSON, label vocabulary, TFTransformOutput) of the written output."""
    import tensorflow_transform as tft

    transform_output = tft.TFTransformOutput(output_dir)
    features = contract.feature_spec_to_json(transform_output.transformed_feature_spec())
    vocab = [] if task != CLASSIFICATION else [
        token.decode("utf-8") if isinstance(token, bytes) else str(token)
        for token in transform_output.vocabulary_by_name(contract.LABEL_VOCABULARY_NAME)
    ]
    return features, vocab, transform_output


def _write_manifest(unused: None, *, output_dir: str, name: str, kind: str, task: str,
                    preprocessing: Mapping[str, Any], shards: list[dict[str, Any]],
                    label_counts: list[tuple[tuple[str, str], int]],
                    rejected: dict[str, Any], transform_written: list[Any],
                    extras: list[Mapping[str, Any]],
                    describe_transform: TransformDescriber | None,
                    check: ManifestCheck | None) -> str:
    del unused, transform_written  # Only ordering: the transform output is final.
    features, vocab, transform_output = _read_transform_output(output_dir, task)
    extra: dict[str, Any] = {}
    for entry in sorted(extras, key=lambda e: sorted(e)):
        clashes = sorted(set(entry) & set(extra))
        if clashes:
            raise ValueError(f"Two extra manifest entries named {clashes}.")
        extra.update(entry)
    if describe_transform is not None:
        extra.update(describe_transform(transform_output))
    try:
        manifest = build_manifest(
            name=name, kind=kind, task=task, shards=shards, label_counts=label_counts,
            rejected=rejected, features=features, label_vocab=vocab,
            preprocessing=preprocessing, versions=library_versions(), extra=extra,
            require_train=check is None)
        if check is not None:
            # Raises to withhold the manifest (accounting, error rate, empty train).
            check(manifest)
    except accounting.WithheldError as e:
        accounting.write_failure(output_dir, e)
        raise
    path = os.path.join(output_dir, contract.MANIFEST_FILENAME)
    fault_injection.pause_point(fault_injection.MANIFEST_WRITING)
    write_text_atomically(path, contract.dumps_manifest(manifest))
    return path


class WriteManifest(beam.PTransform):
    """Writes ``manifest.json`` once every input PCollection is complete.

    Args:
        output_dir: the dataset directory.
        name: dataset name (the shard file prefix).
        preprocessing: every preprocessing parameter, recorded verbatim.
        kind: what an example holds (``"images"``, ``"timeseries"``).
        task: ``"classification"`` (a label vocabulary exists) or ``"forecast"``.
        shards: PCollection of shard entries from ``FinalizeShards``.
        label_counts: PCollection of ``((split, label_name), count)``.
        rejected: single-element PCollection from ``WriteRejections``.
        transform_written: PCollection produced by ``tft_beam.WriteTransformFn``.
        extras: single-element PCollections of extra top-level entries (dicts).
        describe_transform: optional module-level function of the written
            ``TFTransformOutput`` returning more extra entries.
        check: optional module-level function of the finished manifest that raises
            to withhold it (see ``etl/core/accounting.py``).

    Returns:
        A single-element PCollection holding the manifest's path.
    """

    def __init__(self, output_dir: str, name: str, preprocessing: Mapping[str, Any], *,
                 kind: str, task: str,
                 shards: beam.PCollection, label_counts: beam.PCollection,
                 rejected: beam.PCollection, transform_written: beam.PCollection,
                 extras: Sequence[beam.PCollection] = (),
                 describe_transform: TransformDescriber | None = None,
                 check: ManifestCheck | None = None) -> None:
        super().__init__()
        self._output_dir = output_dir
        self._name = name
        self._kind = kind
        self._task = task
        self._extras = tuple(extras)
        self._describe_transform = describe_transform
        self._check = check
        self._preprocessing = dict(preprocessing)
        self._shards = shards
        self._label_counts = label_counts
        self._rejected = rejected
        self._transform_written = transform_written

    def expand(self, pbegin: beam.pvalue.PBegin) -> beam.PCollection:
        extras: Any = []
        if self._extras:
            extras = beam.pvalue.AsSingleton(
                self._extras
                | "FlattenExtras" >> beam.Flatten()
                | "GatherExtras" >> beam.combiners.ToList())
        return (
            pbegin
            | "StartManifest" >> beam.Create([None])
            | "WriteManifestFile" >> beam.Map(
                _write_manifest,
                output_dir=self._output_dir,
                name=self._name,
                kind=self._kind,
                task=self._task,
                extras=extras,
                describe_transform=self._describe_transform,
                check=self._check,
                preprocessing=self._preprocessing,
                shards=beam.pvalue.AsList(self._shards),
                label_counts=beam.pvalue.AsList(self._label_counts),
                rejected=beam.pvalue.AsSingleton(self._rejected),
                transform_written=beam.pvalue.AsList(self._transform_written))
        )
