"""Single-element steps from side inputs: one result over a whole PCollection.

Beam's global combines with a default (``CombineGlobally(fn)``, ``ToList()``,
``Count.Globally()``, ``ToDict()``) each expand to nine transforms, six of them
ParDos, most of which exist to emit the default when the input is empty. Every one
of them costs a small job graph construction, runner-API translation and a few
fused stages of the local runner, and the publishing tail needs about ten such
results. The same results come from side inputs with fewer steps:

* ``Once``: a single element ``fn(**side_inputs)``, computed once every side input
  is complete, however empty they are: an ``Impulse`` and one ``Map`` (two steps).
* ``combined``: the view of a global combine without Beam's default injection
  (four steps), whose empty value is the combine of nothing, as the default is.
* A gathered list is ``beam.pvalue.AsList(pcoll)`` and a dict of pairs
  ``beam.pvalue.AsDict(pairs)``: no step at all. Like ``ToList``, neither has an
  order; every consumer sorts what it reads.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import apache_beam as beam


def _call(unused: bytes, fn: Callable[..., Any], **side_inputs: Any) -> Any:
    del unused  # The impulse: only when to run.
    return fn(**side_inputs)


class Once(beam.PTransform):
    """Pipeline begin → a single element ``fn(**side_inputs)``, once every side
    input (``beam.pvalue.AsList``, ``AsSingleton``, ``AsDict`` ...) is complete.

    ``flat=True`` makes it ``beam.FlatMap``'s: the elements ``fn`` returns.
    """

    def __init__(self, fn: Callable[..., Any], flat: bool = False, **side_inputs: Any
                 ) -> None:
        super().__init__()
        self._fn = fn
        self._flat = flat
        self._side_inputs = side_inputs

    def expand(self, pbegin: beam.pvalue.PBegin) -> beam.PCollection:
        step = beam.FlatMap if self._flat else beam.Map
        return (pbegin
                | "Start" >> beam.Impulse()
                | "Run" >> step(_call, self._fn, **self._side_inputs))


def empty_output(combine_fn: beam.CombineFn) -> Any:
    """What ``combine_fn`` gives for no input: a global combine's default."""
    return combine_fn.extract_output(combine_fn.create_accumulator())


def combined(pcoll: beam.PCollection, label: str, combine_fn: beam.CombineFn
             ) -> beam.pvalue.AsSingleton:
    """The side-input view of ``combine_fn`` over all of ``pcoll`` (combined per
    worker first, as ``CombineGlobally`` does); for an empty ``pcoll``, the combine
    of nothing (``empty_output``)."""
    result = pcoll | label >> beam.CombineGlobally(combine_fn).without_defaults()
    return beam.pvalue.AsSingleton(result, default_value=empty_output(combine_fn))
