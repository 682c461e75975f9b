"""The manifest's ``inputs`` entry: how many inputs the job read, rejected ones too."""

from __future__ import annotations

from typing import Any

import apache_beam as beam

from etl.core import singletons


def count_one(unused: Any) -> int:
    """An input's count: 1 (typed, so that Flink's and Spark's runners can flatten it
    with other ``int`` counts)."""
    del unused
    return 1


def inputs_entry(count: int) -> dict[str, int]:
    """The manifest entry for ``count`` inputs."""
    return {"inputs": count}


class InputsEntry(beam.PTransform):
    """Partial input counts (ints) → a single-element PCollection ``{"inputs": total}``
    (``{"inputs": 0}`` for no count).

    A job counts its inputs where it sees them (images listed, rows parsed, lines
    rejected while parsing); the accounting check reconciles the total with the
    examples written and the inputs rejected.
    """

    def expand(self, counts: beam.PCollection) -> beam.PCollection:
        total = singletons.combined(counts, "Sum", beam.CombineFn.from_callable(sum))
        return counts.pipeline | "ToEntry" >> singletons.Once(inputs_entry, count=total)
