"""What the manifest says about a time-series dataset: its settings, counts and gaps.

``describe_preprocessing`` is the manifest's ``preprocessing`` entry;
``SummariseWindows`` turns the bucket step's per-series statistics into the
``timeseries`` entry, with the reason each split without a window has none.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import apache_beam as beam

from etl.core import singletons
from etl.timeseries.rows.sources import Columns
from etl.timeseries.series import Cleaning, TimeSplit, Windowing
from reader.format import contract


def describe_preprocessing(columns: Columns, windowing: Windowing, cleaning: Cleaning,
                           time_split: TimeSplit, per_series: bool) -> dict[str, Any]:
    """Every windowing, cleaning, splitting and normalising setting, for the manifest."""
    return {
        "windowing": dataclasses.asdict(windowing),
        "value_columns": list(columns.values),
        "timestamp_column": columns.timestamp,
        "timestamp_format": columns.timestamp_format,
        "series_id_column": columns.series_id,
        "layout": "window: float32 [window_size, num_features], row-major (time "
                  "first); target: float32 [horizon, num_features] or label id",
        "cleaning": dataclasses.asdict(cleaning),
        "split_by": time_split.mode,
        # Only the rule in effect: --split_times' cut-offs as given, or the fractions.
        "split_fractions": None if time_split.cutoffs else time_split.fractions.as_dict(),
        "split_times": (list(time_split.cutoff_texts or time_split.cutoffs)
                        if time_split.cutoffs else None),
        "normalize": "per_series" if per_series else "global",
        "normalizer": "z-score per value column: exact mean and population std of "
                      "every clean train row, once; std 0 -> 1",
    }


def empty_split_reasons(counts: dict[str, int], longest: dict[str, int],
                        windowing: Windowing, time_split: TimeSplit) -> dict[str, str]:
    """Why each split without a window has none, in words.

    Args:
        counts: summed statistics of the bucket step (``windows_<split>`` among them).
        longest: rows of the longest piece of a series in each split that has one.
        windowing: the window geometry.
        time_split: how rows were assigned to splits.
    """
    reasons = {}
    for split in contract.SPLITS:
        if counts.get(f"windows_{split}", 0):
            continue
        if split in longest:
            reasons[split] = (
                f"its longest piece of a series has {longest[split]} rows, fewer than "
                f"the {windowing.span} a window and its target span (window_size "
                f"{windowing.window_size}, stride {windowing.stride}, "
                f"horizon {windowing.horizon}); give the split more rows or "
                f"use smaller windows")
        elif time_split.mode == "series":
            reasons[split] = ("no series was assigned to it (--split_by=series: each "
                              "series goes whole to the split its id hashes to)")
        elif time_split.cutoffs is not None:
            reasons[split] = "no clean row has a timestamp in its --split_times range"
        elif time_split.fractions.as_dict()[split] == 0:
            reasons[split] = "--split_fractions gives it no rows"
        else:
            reasons[split] = ("no series has clean rows there (each series' rows are "
                              "split by --split_fractions in time order)")
    return reasons


@dataclasses.dataclass(frozen=True)
class WindowSummary:
    """The settings the ``timeseries`` manifest entry reports next to the counts."""

    value_columns: tuple[str, ...]
    windowing: Windowing
    time_split: TimeSplit

    def entry(self, counts: dict[str, int], parse_rejected: int, longest: dict[str, int]
              ) -> dict[str, Any]:
        """The manifest's ``timeseries`` entry."""
        return {"timeseries": {
            "value_columns": list(self.value_columns),
            "num_features": len(self.value_columns),
            **dataclasses.asdict(self.windowing),
            "counts": dict(sorted(counts.items())),
            "parse_rejected": parse_rejected,
            "empty_splits": empty_split_reasons(counts, longest, self.windowing,
                                                self.time_split),
        }}


class SummariseWindows(beam.PTransform):
    """``(stats, longest)`` of the bucket step → the single-element ``timeseries`` entry.

    Args:
        summary: the settings the entry reports.
        parse_rejected: the side-input view (``AsSingleton``) of how many lines were
            rejected while parsing.

    The input is a pair of PCollections: ``(statistic, count)`` pairs, summed per
    statistic, and ``(split, rows)`` pieces of series, of which the longest per split
    explains a split without windows.
    """

    def __init__(self, summary: WindowSummary, parse_rejected: beam.pvalue.AsSingleton
                 ) -> None:
        super().__init__()
        self._summary = summary
        self._parse_rejected = parse_rejected

    def expand(self, stats_and_longest: tuple[beam.PCollection, beam.PCollection]
               ) -> beam.PCollection:
        stats, pieces = stats_and_longest
        longest = pieces | "LongestPiece" >> beam.CombinePerKey(max)
        counts = stats | "SumStats" >> beam.CombinePerKey(sum)
        return stats.pipeline | "TimeSeriesEntry" >> singletons.Once(
            self._summary.entry, counts=beam.pvalue.AsDict(counts),
            parse_rejected=self._parse_rejected, longest=beam.pvalue.AsDict(longest))
