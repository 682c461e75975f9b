"""Single-element steps from side inputs (etl/core/singletons.py), on literal records."""

from __future__ import annotations

import apache_beam as beam
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to

from etl.core import singletons


def _sorted_total(items: list[int], total: int) -> tuple[list[int], int]:
    return sorted(items), total


def _ascending(items: list[int]) -> list[int]:
    return sorted(items)


def test_once_runs_once_with_every_side_input_complete():
    with TestPipeline() as p:
        numbers = p | "Numbers" >> beam.Create([3, 1, 2])
        result = p | "Gather" >> singletons.Once(
            _sorted_total, items=beam.pvalue.AsList(numbers),
            total=singletons.combined(numbers, "Sum", beam.CombineFn.from_callable(sum)))
        assert_that(result, equal_to([([1, 2, 3], 6)]))


def test_once_runs_once_on_empty_inputs_with_the_combine_of_nothing():
    with TestPipeline() as p:
        nothing = p | "Nothing" >> beam.Create([]).with_output_types(int)
        result = p | "Gather" >> singletons.Once(
            _sorted_total, items=beam.pvalue.AsList(nothing),
            total=singletons.combined(nothing, "Count", beam.combiners.CountCombineFn()))
        assert_that(result, equal_to([([], 0)]))


def test_once_flat_emits_each_returned_element():
    with TestPipeline() as p:
        numbers = p | "Numbers" >> beam.Create([2, 1])
        result = p | "Each" >> singletons.Once(_ascending, flat=True,
                                                items=beam.pvalue.AsList(numbers))
        assert_that(result, equal_to([1, 2]))


def test_empty_output_is_the_combine_of_no_input():
    assert singletons.empty_output(beam.combiners.CountCombineFn()) == 0
    assert singletons.empty_output(beam.combiners.ToListCombineFn()) == []
