"""The shard step both jobs end with: a shard's units → examples → one pending shard file.

A job's shard step is a :class:`ShardStep` that says how to load the exported
``transform_fn`` (:meth:`ShardStep.load_transform`, usually through
:func:`load_transform_fn`) and how to turn the shard's units into blocks of
serialized examples (:meth:`ShardStep.transform_blocks`). The frame does the rest
the same way for every job: it waits for the transform output, loads it once per
process, writes the blocks to the shard's pending file on a writer thread while the
next block is prepared, counts what was written, routes the rejections, records the
finished shard for a resumed run (``etl.core.run.resume``) and emits the shard's
``ShardResult``. A job may also give facts about each example (the image job's
duplicate signatures): the frame records them with the shard, in record order, and
emits them as one ``ShardFacts`` on the ``placement.FACTS`` output. When the run
resumes an interrupted one whose record of the shard still verifies, the frame
emits the recorded result, rejections and facts instead, and the shard's inputs are
not read.
"""

from __future__ import annotations

import collections
import concurrent.futures
import dataclasses
import functools
import itertools
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import apache_beam as beam
import numpy as np
from apache_beam.utils import shared

from etl.core import dead_letters
from etl.core.dead_letters import Rejection
from etl.core.io import storage
from etl.core.run import fault_injection, fingerprint, resume
from etl.core.shards import placement
from etl.core.shards.files import BlockWriter, ShardFormat, ShardWriter
from reader.format import contract


def rows_of(value: Any) -> np.ndarray:
    """A batch output as NumPy: a dense tensor as is; a 2-D ``SparseTensor`` (a
    variable-length feature) as an object array of each row's values, in order."""
    import tensorflow as tf

    if not isinstance(value, tf.SparseTensor):
        return value.numpy()
    values = value.values.numpy()
    bounds = np.searchsorted(value.indices[:, 0].numpy(),
                             np.arange(int(value.dense_shape[0]) + 1))
    rows = np.empty(len(bounds) - 1, dtype=object)
    for row, (start, end) in enumerate(itertools.pairwise(bounds)):
        rows[row] = values[start:end]
    return rows


@dataclasses.dataclass(frozen=True)
class PrunedTransform:
    """An exported ``transform_fn`` pruned to compute ``output_keys`` from some of
    its raw inputs: called with a batch of those inputs (name → tensor), it returns
    each output as a NumPy array (:func:`rows_of`). Thread-safe."""

    output_keys: tuple[str, ...]
    apply: Callable[[dict[str, Any]], dict[str, Any]]

    def __call__(self, inputs: dict[str, Any]) -> dict[str, np.ndarray]:
        outputs = self.apply(inputs)
        return {name: rows_of(outputs[name]) for name in self.output_keys}


def load_transform_fn(transform_fn_dir: str, input_keys: Sequence[str],
                      output_keys: Sequence[str] | None = None, *,
                      leave_out: Sequence[str] = ()) -> PrunedTransform:
    """The exported ``transform_fn`` under ``transform_fn_dir``, pruned to compute
    ``output_keys`` (default: all its outputs but ``leave_out``, sorted) from
    ``input_keys`` only.

    tf.Transform's public ways to apply a ``transform_fn`` (``TransformDataset``,
    ``TFTransformOutput.transform_raw_features``) run its whole graph, every output
    from every raw feature. Only its own loader, the private
    ``saved_transform_io_v2.SavedModelLoader`` that ``TransformDataset`` runs, prunes
    the graph to some inputs and outputs (``finalize``), so that, say, an image's
    label is mapped without its image; this function is the jobs' only use of it.
    """
    from tensorflow_transform.saved import saved_transform_io_v2

    loader = saved_transform_io_v2.SavedModelLoader(transform_fn_dir)
    keys = tuple(sorted(set(loader.structured_outputs) - set(leave_out))
                 if output_keys is None else output_keys)
    loader.finalize(list(input_keys), list(keys))
    return PrunedTransform(keys, loader.apply_transform_model)


@dataclasses.dataclass(frozen=True)
class ShardBlock:
    """Consecutive examples of a shard, serialized, in shard order; the labels of
    those examples (none for a task without labels); the shard's units that
    became no example while the block was made; and facts about each example (JSON
    fields, one per example, or none)."""

    examples: Sequence[bytes]
    labels: Sequence[str] = ()
    rejections: Sequence[Rejection] = ()
    facts: Sequence[dict[str, Any]] = ()

    def __post_init__(self) -> None:
        if self.facts and len(self.facts) != len(self.examples):
            raise ValueError(f"A block of {len(self.examples)} examples has "
                             f"{len(self.facts)} facts: give one per example, or none.")


@dataclasses.dataclass(frozen=True)
class ShardFacts:
    """A job's facts about each record of one shard (JSON fields, in record order:
    ``facts[i]`` is record ``i``, from 0, of the pending file of shard ``shard`` of
    ``split``). One element per shard, not per record: every element crossing a
    stage costs the local runner more than a record's facts do."""

    split: str
    shard: int
    facts: tuple[dict[str, Any], ...]


def _emit_facts(split: str, shard: int, facts: Sequence[dict[str, Any]]
                ) -> Iterator[beam.pvalue.TaggedOutput]:
    if facts:
        yield beam.pvalue.TaggedOutput(placement.FACTS, ShardFacts(split, shard, tuple(facts)))


class ShardStep(beam.DoFn):
    """``((split, shard), [unit])`` → the shard's pending file; emits its
    ``ShardResult``, ``Rejection``s tagged ``dead_letters.REJECTED`` and
    a ``ShardFacts`` tagged ``placement.FACTS``.

    Subclasses set ``WRITTEN_COUNTER`` (the Beam counter of examples written) and
    implement :meth:`load_transform` and :meth:`transform_blocks`; ones that need
    more per-process resources extend ``setup`` and ``teardown``.
    """

    WRITTEN_COUNTER = "examples_written"

    def __init__(self, output_dir: str, name: str, shard_format: ShardFormat,
                 transform_handle: shared.Shared) -> None:
        self._output_dir = output_dir
        self._name = name
        self._format = shard_format
        self._transform_handle = transform_handle

    @property
    def shard_format(self) -> ShardFormat:
        """How the step writes its shard files."""
        return self._format

    def load_transform(self, transform_fn_dir: str) -> Any:
        """The job's transform, loaded once per process and shared by its threads."""
        raise NotImplementedError

    def transform_blocks(self, units: Iterable[Any], transform: Any
                         ) -> Iterator[ShardBlock]:
        """The shard's examples, in shard order, a block at a time."""
        raise NotImplementedError

    def input_identities(self, units: Sequence[Any]) -> list[str]:
        """What of each unit shapes the shard (``fingerprint.unit_identity``), for the
        shard's resume record; a job whose units name files adds what shows the file
        is unchanged."""
        return [fingerprint.unit_identity(unit) for unit in units]

    def shard_written(self, result: placement.ShardResult, num_shards: dict[str, int],
                      kept: bool) -> None:
        """Called once a shard is written (or ``kept`` from the interrupted run this
        one resumes), before its result is emitted."""

    def setup(self) -> None:
        self._write_pool = concurrent.futures.ThreadPoolExecutor(
            1, thread_name_prefix="WriteShard")
        counter = functools.partial(beam.metrics.Metrics.counter,
                                    dead_letters.METRICS_NAMESPACE)
        self._written = counter(self.WRITTEN_COUNTER)
        self._shards_kept = counter(resume.SHARDS_KEPT_COUNTER)
        self._shards_transformed = counter(resume.SHARDS_TRANSFORMED_COUNTER)
        self._units_transformed = counter(resume.UNITS_TRANSFORMED_COUNTER)

    def teardown(self) -> None:
        self._write_pool.shutdown(wait=True)

    def process(self, element: tuple[tuple[str, int], Iterable[Any]],
                num_shards: dict[str, int], transform_dir: str,
                resuming: bool = False) -> Iterator[Any]:
        (split, shard), grouped = element
        units = list(grouped)
        inputs_sha256 = fingerprint.shard_inputs_digest(self.input_identities(units))
        if resuming:
            kept = resume.kept_shard(self._output_dir, split, shard, inputs_sha256)
            if kept is not None:
                self._shards_kept.inc()
                for rejection in kept.rejections:
                    yield from dead_letters.route(rejection)
                yield from _emit_facts(split, shard, kept.facts)
                result = placement.ShardResult(
                    split, shard, kept.path if kept.num_records else None,
                    kept.num_records, kept.num_bytes, kept.sha256, kept.label_counts,
                    kept.index)
                self.shard_written(result, num_shards, kept=True)
                yield result
                return
        yield from self._write(split, shard, units, inputs_sha256, num_shards,
                               storage.join(transform_dir, contract.TRANSFORM_FN_DIRNAME))

    def _write(self, split: str, shard: int, units: list[Any], inputs_sha256: str,
               num_shards: dict[str, int], transform_fn_dir: str) -> Iterator[Any]:
        transform = self._transform_handle.acquire(
            lambda: self.load_transform(transform_fn_dir), tag=transform_fn_dir)
        relpath = placement.pending_relpath(self._name, split, shard,
                                           self._format.compression)
        labels: collections.Counter[str] = collections.Counter()
        rejections: list[Rejection] = []
        facts: list[dict[str, Any]] = []
        with ShardWriter(storage.join(self._output_dir, relpath),
                         self._format) as writer, BlockWriter(
                             writer, self._write_pool) as blocks:
            # Each block is written on the writer thread (deflate included) while
            # this thread makes the next.
            for block in self.transform_blocks(units, transform):
                blocks.write(list(block.examples))
                labels.update(block.labels)
                rejections.extend(block.rejections)
                facts.extend(block.facts)
        self._written.inc(writer.num_records)
        self._shards_transformed.inc()
        self._units_transformed.inc(len(units))
        result = placement.ShardResult.of(split, shard, relpath, writer, labels.items())
        resume.record_shard(self._output_dir, resume.ShardRecord(
            split=split, shard=shard, path=relpath, num_records=result.num_records,
            num_bytes=result.num_bytes, sha256=result.sha256, index=result.index,
            label_counts=result.label_counts, rejections=tuple(rejections),
            inputs_sha256=inputs_sha256, facts=tuple(facts)))
        fault_injection.pause_point(fault_injection.SHARD_RECORDED)
        for rejection in rejections:
            yield from dead_letters.route(rejection)
        yield from _emit_facts(split, shard, facts)
        self.shard_written(result, num_shards, kept=False)
        yield result
