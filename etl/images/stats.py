"""The image job's statistics and quality flags, from the facts its shard step took.

``WriteImageStatistics``, the job's statistics step in the publishing tail
(``etl.core.publishing.spec.StatisticsStep``), gets each shard's ``ShardFacts``
(``etl.images.facts``: sizes, format, orientation, quality measures, labels, targets
of every written image, in record order) and, with ``--cross_split_duplicates=drop``,
the records taken out of the shards, which it leaves out. Per shard, the facts become
partial statistics, merged per split and written by
``etl.core.stats.step.WriteStatistics``. The flags (``etl.images.quality``) need one
fact of the whole dataset, the quartiles of sqrt(width x height) for ``odd_size``:
those sizes, a float per image in one tuple per shard, are gathered and their bounds
computed exactly; then each shard's images are flagged, and the flagged ones, sorted
by key, are written to ``statistics/flags.jsonl``. Flags report; no image is dropped
for one.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import apache_beam as beam

from etl.core.io import storage
from etl.core.run.versions import DatasetVersion
from etl.core.shards.step import ShardFacts
from etl.core.singletons import Once
from etl.core.stats import step as stats_step
from etl.core.stats.features import FeatureSpec
from etl.images import facts as image_facts
from etl.images import quality
from etl.images.labels import LabelColumns
from reader.format import contract

if TYPE_CHECKING:
    from etl.core.publishing.spec import WrittenShards


def kept_facts(element: ShardFacts, removed: Mapping[tuple[str, int], Sequence[int]]
               ) -> ShardFacts:
    """``element`` without the facts of the records taken out of its shard."""
    positions = set(removed.get((element.split, element.shard), ()))
    if not positions:
        return element
    return ShardFacts(element.split, element.shard, tuple(
        fields for position, fields in enumerate(element.facts) if position not in positions))


def image_size(fields: Mapping[str, Any]) -> float:
    """The size ``odd_size`` compares (``quality.image_size``)."""
    return quality.image_size(fields["width"], fields["height"])


def _label(fields: Mapping[str, Any], columns: LabelColumns) -> Any:
    if columns.label_column is None:
        return None
    if columns.multi_label:
        return list(fields["labels"])
    return fields["labels"][0] if fields["labels"] else None


def flag_lines(element: ShardFacts, bounds: tuple[float, float] | None,
               columns: LabelColumns, thresholds: quality.FlagThresholds
               ) -> tuple[dict[str, Any], ...]:
    """A shard's flagged images as their ``flags.jsonl`` fields."""
    lines = []
    for fields in element.facts:
        found = quality.image_flags(fields, bounds, thresholds)
        if found:
            lines.append({"key": fields["key"], "split": element.split,
                          "label": _label(fields, columns), "flags": list(found),
                          "values": dict(found)})
    return tuple(lines)


def _size_bounds(sizes: Sequence[tuple[float, ...]], iqr_factor: float
                 ) -> tuple[float, float] | None:
    every = [size for shard in sizes for size in shard]
    return quality.size_bounds(sorted(every), iqr_factor) if every else None


class _FlagsFile:
    """Writes the flagged images, sorted by key; the flags' manifest entry."""

    def __init__(self, output_dir: str, version: DatasetVersion) -> None:
        self._relpath = f"{contract.statistics_dir(version.number)}/{contract.FLAGS_FILENAME}"
        self._path = storage.join(output_dir, self._relpath)

    def __call__(self, shards: Sequence[tuple[dict[str, Any], ...]], entry: dict[str, Any],
                 bounds: tuple[float, float] | None) -> dict[str, Any]:
        if not entry:
            return entry  # No image was written: no statistics, no flags.
        lines = sorted((line for shard in shards for line in shard),
                       key=lambda line: line["key"])
        storage.write_text(self._path, "".join(
            json.dumps(line, sort_keys=True, ensure_ascii=False) + "\n" for line in lines))
        counts = {name: 0 for name in quality.FLAG_NAMES}
        for line in lines:
            for name in line["flags"]:
                counts[name] += 1
        statistics = dict(entry[stats_step.STATISTICS_ENTRY])
        statistics["flags"] = {"file": self._relpath, "images": len(lines),
                               "counts": counts,
                               "odd_size_bounds": None if bounds is None
                               else [round(bound, 3) for bound in bounds]}
        return {stats_step.STATISTICS_ENTRY: statistics}


class WriteImageStatistics(beam.PTransform):
    """``WrittenShards``, ``{"facts": ShardFacts, "removals": Removal}`` (removals
    only with ``drop``) → the statistics and flags files; returns a single-element
    PCollection, the manifest's ``statistics`` entry."""

    def __init__(self, output_dir: str, version: DatasetVersion, columns: LabelColumns,
                 thresholds: quality.FlagThresholds | None = None) -> None:
        super().__init__()
        self._output_dir = output_dir
        self._version = version
        self._columns = columns
        self._thresholds = thresholds or quality.FlagThresholds()
        self._features: list[FeatureSpec] = image_facts.statistics_features(columns)

    def _partials(self, element: ShardFacts) -> Iterator[Any]:
        yield ((element.split, stats_step.ROWS), (element.shard, image_facts.facts_statistics(
            element.facts, self._features, self._columns.multi_label)))

    def expand(self, written: WrittenShards) -> beam.PCollection:
        facts, removals = written["facts"], written.get("removals")
        if removals is not None:
            removed = beam.pvalue.AsDict(removals | "RemovedPositions" >> beam.Map(
                lambda r: ((r.split, r.shard), r.positions)))
            facts = facts | "LeaveOutRemoved" >> beam.Map(kept_facts, removed=removed)
        entry = (facts
                 | "ShardStatistics" >> beam.FlatMap(self._partials)
                 | "WriteStatistics" >> stats_step.WriteStatistics(self._output_dir,
                                                                   self._version))
        sizes = facts | "Sizes" >> beam.Map(
            lambda e: tuple(image_size(fields) for fields in e.facts))
        pipeline = facts.pipeline
        bounds = pipeline | "SizeBounds" >> Once(
            _size_bounds, sizes=beam.pvalue.AsList(sizes),
            iqr_factor=self._thresholds.odd_size_iqr_factor)
        flagged = facts | "Flag" >> beam.Map(
            flag_lines, bounds=beam.pvalue.AsSingleton(bounds), columns=self._columns,
            thresholds=self._thresholds)
        return pipeline | "WriteFlags" >> Once(
            _FlagsFile(self._output_dir, self._version),
            shards=beam.pvalue.AsList(flagged), entry=beam.pvalue.AsSingleton(entry),
            bounds=beam.pvalue.AsSingleton(bounds))

