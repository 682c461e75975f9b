"""Unit tests of etl/core/shards/plan.py: the PlanShards composite on literal units."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

import apache_beam as beam
import pytest
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to

from etl.core.shards.plan import PlanShards

# Never the plain DirectRunner: it first tries to download Prism, which stalls offline.
RUNNER = "apache_beam.runners.portability.fn_api_runner.FnApiRunner"


class Unit(NamedTuple):
    split: str
    key: str
    num_bytes: int


# 5 train units of 30 bytes (150 in all), 2 test units of 100 bytes (200 in all).
UNITS = ([Unit("train", f"t{i}", 30) for i in range(5)]
         + [Unit("test", f"s{i}", 100) for i in range(2)])


def _measure(unit: Unit) -> tuple[int, int]:
    return 1, unit.num_bytes


def _summed_bytes(split: str, sums: tuple[int, ...], estimates: Mapping[str, Any]) -> int:
    return sums[1]


def _estimated_bytes(split: str, sums: tuple[int, ...], estimates: Mapping[str, Any]
                     ) -> int:
    return sums[0] * estimates.get(split, 0)


def _largest_unit(unit: Unit) -> tuple[str, int]:
    return unit.split, unit.num_bytes


def _per_unit_estimate(units: beam.PCollection, sums: Any) -> beam.PCollection:
    # (split, the largest unit's bytes): an estimate made from the units themselves.
    del sums
    return units | beam.Map(_largest_unit) | beam.CombinePerKey(max)


def _plan(units: list[Unit], expected: list[tuple[str, int]], **kwargs: Any) -> None:
    with TestPipeline(runner=RUNNER) as p:
        planned = p | beam.Create(units) | PlanShards(measure=_measure, **kwargs)
        assert_that(planned, equal_to(expected))


def test_plan_shards_divides_each_splits_summed_bytes_by_the_target():
    # train: ceil(150 / 40) = 4; test: ceil(200 / 40) = 5, capped at its 2 units.
    _plan(UNITS, split_bytes=_summed_bytes, target_shard_bytes=40, num_shards=None,
          expected=[("train", 4), ("test", 2)])


def test_plan_shards_gives_num_shards_to_every_split_capped_at_its_units():
    _plan(UNITS, split_bytes=_summed_bytes, target_shard_bytes=40, num_shards=3,
          expected=[("train", 3), ("test", 2)])


def test_plan_shards_omits_splits_without_units():
    _plan(UNITS[:5], split_bytes=_summed_bytes, target_shard_bytes=1000, num_shards=None,
          expected=[("train", 1)])


def test_plan_shards_gives_the_estimate_to_split_bytes():
    # train: 5 units x 30 = 150 bytes / 50 = 3 shards; test: 2 x 100 = 200 / 50 = 4,
    # capped at 2.
    _plan(UNITS, split_bytes=_estimated_bytes, estimate=_per_unit_estimate,
          target_shard_bytes=50, num_shards=None, expected=[("train", 3), ("test", 2)])


def test_plan_shards_without_an_estimate_gives_split_bytes_no_estimates():
    # No estimate: every split's estimated bytes are 0, one shard each.
    _plan(UNITS, split_bytes=_estimated_bytes, target_shard_bytes=50, num_shards=None,
          expected=[("train", 1), ("test", 1)])


@pytest.mark.parametrize(("target", "num_shards", "message"), [
    (0, None, "Target shard size must be >= 1 byte, got 0"),
    (100, 0, "--num_shards must be >= 1, got 0"),
])
def test_plan_shards_refuses_bad_settings_when_built(target, num_shards, message):
    with pytest.raises(ValueError, match=message):
        PlanShards(measure=_measure, split_bytes=_summed_bytes,
                   target_shard_bytes=target, num_shards=num_shards)
