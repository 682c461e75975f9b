"""Taking chosen records out of written shards, before they get their final names.

A decision that needs every shard's facts (the image job's cross-split duplicates,
``--cross_split_duplicates=drop``) can only be made once every shard is written.
Each shard that holds a record to remove is then copied, record by record, without
those records, into a new pending file (the old one is deleted); the others are
untouched. Nothing is decoded or transformed again: the records are copied as
written, so a shard that loses records is byte for byte the shard the step would
have written without them. The records are found by their positions in the pending
file (``etl.core.shards.step.ShardFacts``), so no record is parsed.
"""

from __future__ import annotations

import collections
import dataclasses
import gzip
from collections.abc import Mapping

import apache_beam as beam

from etl.core.io import storage
from etl.core.shards import placement
from etl.core.shards.files import ShardFormat, ShardWriter
from reader.format import contract, record_index

# Records copied per write while a shard is copied without some of its records.
COPY_BLOCK_RECORDS = 256


@dataclasses.dataclass(frozen=True)
class Removal:
    """The records to take out of provisional shard ``shard`` of ``split``: their
    positions in its pending file (sorted, from 0) and, for its label counts, the
    label names they carry (a name once per record it labels)."""

    split: str
    shard: int
    positions: tuple[int, ...]
    labels: tuple[str, ...] = ()


def kept_relpath(pending: str) -> str:
    """Where a pending shard's copy without its removed records is written."""
    stem, suffix = pending.split(".", 1)
    return f"{stem}-kept.{suffix}"


def remove_records(result: placement.ShardResult, removals: Mapping[tuple[str, int], Removal],
                   output_dir: str, shard_format: ShardFormat) -> placement.ShardResult:
    """``result`` itself when it loses no record, else the result of its copy
    without the records ``removals`` names (its pending file and index deleted).

    Raises:
        ValueError: if a position is not a record of the shard.
    """
    removal = removals.get((result.split, result.shard))
    if removal is None:
        return result
    if result.path is None or removal.positions[-1] >= result.num_records:
        raise ValueError(f"Cannot remove records {list(removal.positions)} of shard "
                         f"{result.shard} of {result.split!r}: it holds "
                         f"{result.num_records}.")
    source = storage.join(output_dir, result.path)
    relpath = kept_relpath(result.path)
    removed = frozenset(removal.positions)
    with storage.open_read(source) as raw, ShardWriter(
            storage.join(output_dir, relpath), shard_format) as writer:
        records = (raw if shard_format.compression == contract.NO_COMPRESSION
                   else gzip.GzipFile(fileobj=raw, mode="rb"))
        block: list[bytes] = []  # A shard may be far larger than memory: a block at a time.
        for position, record in enumerate(record_index.read_frames(records, source)):
            if position not in removed:
                block.append(record)
            if len(block) == COPY_BLOCK_RECORDS:
                writer.write_all(block)
                block = []
        writer.write_all(block)
    storage.delete(source)
    if result.index is not None:
        storage.delete(contract.index_relpath(source))
    labels = collections.Counter(dict(result.label_counts))
    labels.subtract(removal.labels)
    return placement.ShardResult.of(result.split, result.shard, relpath, writer,
                                   [(label, n) for label, n in labels.items() if n > 0])


class RemoveRecords(beam.PTransform):
    """``ShardResult``s → the same, with the records of ``removals`` (a
    PCollection of ``Removal``, at most one per shard) taken out of their shards;
    each shard on the worker that holds its result."""

    def __init__(self, output_dir: str, shard_format: ShardFormat,
                 removals: beam.PCollection) -> None:
        super().__init__()
        self._output_dir = output_dir
        self._format = shard_format
        self._removals = removals

    def expand(self, results: beam.PCollection) -> beam.PCollection:
        keyed = self._removals | "KeyRemovals" >> beam.Map(
            lambda removal: ((removal.split, removal.shard), removal))
        return results | "CopyWithoutRemoved" >> beam.Map(
            remove_records, removals=beam.pvalue.AsDict(keyed),
            output_dir=self._output_dir, shard_format=self._format)
