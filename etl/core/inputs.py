"""The manifest's ``inputs`` entry: how many inputs the job read, rejected ones too."""

from __future__ import annotations

import apache_beam as beam


def inputs_entry(count: int) -> dict[str, int]:
    """The manifest entry for ``count`` inputs."""
    return {"inputs": count}


class InputsEntry(beam.PTransform):
    """Partial input counts (ints) → a single-element PCollection ``{"inputs": total}``.

    A job counts its inputs where it sees them (images listed, rows parsed, lines
    rejected while parsing); the accounting check reconciles the total with the
    examples written and the inputs rejected.
    """

    def expand(self, counts: beam.PCollection) -> beam.PCollection:
        return (
            counts
            | "Sum" >> beam.CombineGlobally(sum)
            | "ToEntry" >> beam.Map(inputs_entry)
        )
