"""A written dataset's statistics in TFDV's format: per split, the schema, and drift.

A job hands ``WriteStatistics`` partial statistics (``etl.core.stats.features``),
each keyed by its split, what it counts (``ROWS``: the examples or input rows;
``SERIES``: one example per series) and a sort key (a shard, a bucket). The
partials of a split are merged in sort-key order, so the files do not depend on
how the runner delivered them; each split's is written as
``statistics/<split>.tfrecord``, TFDV's own statistics file
(``contract.statistics_relpath``). Then, once: the schema inferred from train
(``statistics/schema.pbtxt``, TFDV's rules, ``reader.stats.schema``), and drift
between train and each other split (``statistics/drift.json``, TFDV's comparators,
``reader.stats.drift``). A version added by ``--append`` writes its files under
``statistics/vNNNNN/``, is validated against the first version's schema, and its
splits are also compared with the previous version's same splits. Only partial
statistics (compacted sketches, a few KB a feature) and the merged protos cross
stages. The manifest's ``statistics`` entry says where each file is and what is
over its threshold.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, BinaryIO

import apache_beam as beam
from tensorflow_metadata.proto.v0 import statistics_pb2

from etl.core.io import storage
from etl.core.run.versions import DatasetVersion
from etl.core.singletons import Once
from etl.core.stats.features import SplitStatistics, merge_in_order, write_statistics
from reader.format import contract
from reader.stats import drift
from reader.stats import files as stats_files
from reader.stats import schema as stats_schema

ROWS, SERIES = "rows", "series"
STATISTICS_ENTRY = "statistics"


def _write_split(element: tuple[tuple[str, str], Iterable[tuple[Any, SplitStatistics]]],
                 output_dir: str, version: int) -> tuple[tuple[str, str], bytes]:
    """One split's partials merged and written; its statistics, serialized."""
    (split, kind), parts = element
    merged = merge_in_order(parts)
    dataset = merged.to_proto(split) if merged is not None else (
        statistics_pb2.DatasetFeatureStatistics(name=split))
    relpath = contract.statistics_relpath(split, version, series=kind == SERIES)
    write_statistics(storage.join(output_dir, relpath), dataset)
    return (split, kind), dataset.SerializeToString(deterministic=True)


def _datasets(written: Iterable[tuple[tuple[str, str], bytes]], kind: str
              ) -> dict[str, statistics_pb2.DatasetFeatureStatistics]:
    found = {split: statistics_pb2.DatasetFeatureStatistics.FromString(data)
             for (split, of), data in written if of == kind}
    return {split: found[split] for split in contract.ordered_splits(found)}


def drift_entries(datasets: Mapping[str, statistics_pb2.DatasetFeatureStatistics],
                  previous: Mapping[str, statistics_pb2.DatasetFeatureStatistics],
                  previous_version: int | None, thresholds: Mapping[str, float]
                  ) -> list[dict[str, Any]]:
    """Each split against train, and each against the previous version's same split."""
    entries: list[dict[str, Any]] = []
    train = datasets.get(contract.TRAIN)
    for split, dataset in datasets.items():
        if train is not None and split != contract.TRAIN:
            entries += drift.compare(train, dataset, split=split, baseline=contract.TRAIN,
                                     thresholds=thresholds)
        if split in previous and previous_version is not None:
            baseline = f"v{previous_version:05d}/{split}"
            entries += drift.compare(previous[split], dataset, split=split,
                                     baseline=baseline, thresholds=thresholds)
    return drift.sort_entries(entries)


class _Summary:
    """The schema, the drift and the manifest entry, from every split's statistics."""

    def __init__(self, output_dir: str, version: DatasetVersion,
                 thresholds: Mapping[str, float]) -> None:
        self._output_dir = output_dir
        self._version = version
        self._thresholds = dict(thresholds)

    def _schema(self, datasets: Mapping[str, statistics_pb2.DatasetFeatureStatistics]
                ) -> tuple[str | None, list[dict[str, Any]]]:
        """(the schema's path relative to the dataset, this version's anomalies against
        it): the first version infers and writes it, an appended one is validated."""
        relpath = f"{contract.STATISTICS_DIRNAME}/{contract.SCHEMA_FILENAME}"
        first = storage.join(self._output_dir, relpath)
        if self._version.appends:
            if not storage.exists(first):
                return None, []
            schema = stats_files.parse_schema(storage.read_text(first), first)
            return relpath, [{"split": split, **anomaly}
                           for split, dataset in datasets.items()
                           for anomaly in stats_schema.validate(dataset, schema)]
        if contract.TRAIN not in datasets:
            return None, []
        train = datasets[contract.TRAIN]
        # Every text feature is a category (labels "0".."9" included, which TFDV's rules
        # would take for integers): a new value is then a new category.
        categorical = [stats_files.feature_name(feature) for feature in train.features
                       if feature.type == statistics_pb2.FeatureNameStatistics.STRING]
        schema = stats_schema.infer_schema(train, categorical=categorical)
        storage.write_text(first, stats_files.schema_text(schema))
        return relpath, []

    def _previous(self) -> tuple[int | None, dict[str, statistics_pb2.DatasetFeatureStatistics]]:
        if not self._version.appends:
            return None, {}
        number = self._version.number - 1
        found = {}
        for split in contract.ordered_splits(self._version.previous.get("splits", {})):
            path = storage.join(self._output_dir, contract.statistics_relpath(split, number))
            if storage.exists(path):
                found[split] = stats_files.parse_statistics(
                    storage.read_bytes(path), path).datasets[0]
        return (number if found else None), found

    def __call__(self, written: Sequence[tuple[tuple[str, str], bytes]]) -> dict[str, Any]:
        datasets = _datasets(written, ROWS)
        if not datasets:
            # Nothing was written (an append with nothing new publishes nothing).
            return {}
        schema, anomalies = self._schema(datasets)
        previous_version, previous = self._previous()
        entries = drift_entries(datasets, previous, previous_version, self._thresholds)
        drift_relpath = (f"{contract.statistics_dir(self._version.number)}/"
                         f"{contract.DRIFT_FILENAME}")
        storage.write_text(storage.join(self._output_dir, drift_relpath),
                           json.dumps(entries, indent=1, sort_keys=True) + "\n")
        series = _datasets(written, SERIES)
        entry: dict[str, Any] = {
            "version": self._version.number,
            "splits": {split: contract.statistics_relpath(split, self._version.number)
                       for split in datasets},
            "schema": schema,
            "drift": drift_relpath,
            "drift_over": [f"{e['split']} vs {e['baseline']}: {e['feature']}"
                           for e in entries if e["over"]],
            "thresholds": self._thresholds,
        }
        if series:
            entry["series"] = {split: contract.statistics_relpath(
                split, self._version.number, series=True) for split in series}
        if self._version.appends:
            entry["anomalies"] = anomalies
        return {STATISTICS_ENTRY: entry}


class WriteStatistics(beam.PTransform):
    """``((split, ROWS | SERIES), (sort key, SplitStatistics))`` partials → the
    statistics files under ``output_dir``; returns a single-element PCollection, the
    manifest's ``statistics`` entry (a dict)."""

    def __init__(self, output_dir: str, version: DatasetVersion,
                 thresholds: Mapping[str, float] | None = None) -> None:
        super().__init__()
        self._output_dir = output_dir
        self._version = version
        self._thresholds = dict(drift.DEFAULT_THRESHOLDS if thresholds is None
                                else thresholds)

    def expand(self, partials: beam.PCollection) -> beam.PCollection:
        # ((split, kind), serialized DatasetFeatureStatistics)
        written = (partials
                   | "GroupBySplit" >> beam.GroupByKey()
                   | "MergeAndWrite" >> beam.Map(_write_split, output_dir=self._output_dir,
                                                 version=self._version.number))
        return partials.pipeline | "Summarise" >> Once(
            _Summary(self._output_dir, self._version, self._thresholds),
            written=beam.pvalue.AsList(written))


class WriteStatisticsOf(beam.PTransform):
    """The publishing tail's statistics step (``etl.core.publishing.spec.StatisticsStep``)
    for a job whose partials come from its own earlier steps rather than from what
    the shard writers report: the time-series job's rows and series, summed by its
    series step before any window is cut. ``WriteStatistics`` of ``partials``; what
    the tail hands it (``etl.core.publishing.spec.WrittenShards``) is not read, since
    no record is taken out of a window shard."""

    def __init__(self, partials: beam.PCollection, output_dir: str,
                 version: DatasetVersion) -> None:
        super().__init__()
        self._partials = partials
        self._output_dir = output_dir
        self._version = version

    def expand(self, written: Mapping[str, Any]) -> beam.PCollection:
        del written  # Not read: the statistics are of the partials.
        return self._partials | "WriteStatistics" >> WriteStatistics(
            self._output_dir, self._version)


class _StorageFiles:
    """``reader.records.Files`` through ``etl.core.io.storage``: the report reads and
    writes with the job's own client (Beam's for ``gs://``), so an install without
    gcsfs writes it, with no second client to configure."""

    def read(self, path: str) -> bytes:
        return storage.read_bytes(path)

    def open(self, path: str) -> BinaryIO:
        return storage.open_read(path)

    def write(self, path: str, data: bytes) -> None:
        storage.write_bytes(path, data)

    def names(self, directory: str) -> list[str]:
        found = storage.entries(directory)
        if not found:  # No folder (an object store has no empty ones).
            raise FileNotFoundError(directory)
        return [name for name in found if not name.endswith("/")]


def write_report(manifest_path: str | None, output_dir: str) -> str | None:
    """Writes ``report/index.html`` of the dataset whose manifest was just
    published (``reader.report``, rendered from what is on disk); None when the run
    published nothing (an append with nothing new)."""
    from reader import records
    from reader.report import build as report

    if manifest_path is None:
        return None
    with records.files_through(_StorageFiles()):
        return report.write_report(output_dir)
