"""The statistics steps on literal partials: the files written and the manifest entry."""

from __future__ import annotations

import apache_beam as beam
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to

from etl.core.run.versions import FIRST_VERSION
from etl.core.shards.step import ShardFacts
from etl.core.stats import step as stats_step
from etl.core.stats.features import FLOAT, FeatureSpec, SplitStatistics
from reader.format import contract
from reader.stats import files as stats_files

SPECS = (FeatureSpec("x", FLOAT),)


def _partial(*values: float) -> SplitStatistics:
    stats = SplitStatistics(SPECS)
    stats.add(len(values), {"x": list(values)})
    return stats


def test_write_statistics_of_writes_its_partials_not_the_written_shards(tmp_path):
    out = str(tmp_path)
    partials = [(("train", stats_step.ROWS), (0, _partial(1.0, 2.0))),
                (("train", stats_step.ROWS), (1, _partial(3.0))),
                (("test", stats_step.ROWS), (0, _partial(4.0)))]
    # Facts of a shard the partials know nothing of: the step must not read them.
    facts = [ShardFacts("validation", 0, ({"key": "k", "x": 9.0},))]
    with TestPipeline() as pipeline:
        written = {"facts": pipeline | "Facts" >> beam.Create(facts)}
        entry = written | stats_step.WriteStatisticsOf(
            pipeline | "Partials" >> beam.Create(partials), out, FIRST_VERSION)
        assert_that(entry | beam.Map(lambda e: sorted(e[stats_step.STATISTICS_ENTRY]
                                                      ["splits"].items())),
                    equal_to([[("test", contract.statistics_relpath("test", 1)),
                               ("train", contract.statistics_relpath("train", 1))]]))
    datasets = stats_files.read_split_statistics(out)
    assert {split: d.num_examples for split, d in datasets.items()} == {"train": 3, "test": 1}
