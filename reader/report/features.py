"""The report's per-feature statistics: one table per feature, a row per split.

Numeric features show count, missing, mean, standard deviation, min, median, max
and the STANDARD (equal-width) histogram; string features their count, missing,
distinct values and top values, from TFDV's ``DatasetFeatureStatistics`` protos.
"""

from __future__ import annotations

from collections.abc import Mapping

from tensorflow_metadata.proto.v0 import statistics_pb2

from reader.report import svg
from reader.report.svg import esc, number
from reader.stats.files import feature_name

TOP_VALUES_SHOWN = 10
# What an image feature measures, where its name alone could mislead: the size
# features are the source file's, before preprocessing, not the stored image's.
IMAGE_FEATURE_NOTES = {
    "width": "the source file's width in pixels (upright), before resizing",
    "height": "the source file's height in pixels (upright), before resizing",
    "megapixels": "of the source file",
    "aspect_ratio": "the source file's width / height",
    "file_bytes": "the source file's size",
    "format": "the source file's container",
    "mode": "the source file's pixels, as Pillow names them",
    "orientation": "the source file's EXIF orientation",
}
_NUMERIC_HEAD = ("count", "missing", "mean", "std", "min", "median", "max", "histogram")
_STRING_HEAD = ("count", "missing", "distinct", "top values")


def standard_histogram(stats: statistics_pb2.NumericStatistics
                       ) -> list[tuple[float, float, float]]:
    """The STANDARD histogram's ``(low, high, count)`` buckets ([] if none)."""
    for histogram in stats.histograms:
        if histogram.type == statistics_pb2.Histogram.STANDARD:
            return [(b.low_value, b.high_value, b.sample_count) for b in histogram.buckets]
    return []


def top_values(stats: statistics_pb2.StringStatistics) -> list[tuple[str, float]]:
    """The most frequent values and their counts: ``top_values``, else the rank
    histogram's buckets."""
    if stats.top_values:
        pairs = [(v.value, v.frequency) for v in stats.top_values]
    else:
        pairs = [(b.label, b.sample_count) for b in stats.rank_histogram.buckets]
    return pairs[:TOP_VALUES_SHOWN]


def _numeric_cells(stats: statistics_pb2.NumericStatistics, split: str) -> list[str]:
    common = stats.common_stats
    if not common.num_non_missing:
        return [number(0), number(common.num_missing)] + ["—"] * 6
    return [number(common.num_non_missing), number(common.num_missing),
            number(stats.mean), number(stats.std_dev), number(stats.min),
            number(stats.median), number(stats.max),
            svg.histogram(standard_histogram(stats), svg.colour(split))]


def _string_cells(stats: statistics_pb2.StringStatistics, split: str) -> list[str]:
    common = stats.common_stats
    return [number(common.num_non_missing), number(common.num_missing),
            number(stats.unique),
            svg.ranked(top_values(stats), svg.colour(split))]


def _cells(feature: statistics_pb2.FeatureNameStatistics, split: str
           ) -> tuple[tuple[str, ...], list[str]]:
    """The header and the (already escaped or SVG) cells of one split's row."""
    which = feature.WhichOneof("stats")
    if which == "num_stats":
        return _NUMERIC_HEAD, _numeric_cells(feature.num_stats, split)
    if which == "string_stats":
        return _STRING_HEAD, _string_cells(feature.string_stats, split)
    if which == "bytes_stats":
        common = feature.bytes_stats.common_stats
        return _STRING_HEAD, [number(common.num_non_missing), number(common.num_missing),
                              number(feature.bytes_stats.unique), "(bytes)"]
    return _STRING_HEAD, ["—"] * len(_STRING_HEAD)


def _feature_table(name: str, per_split: Mapping[str, statistics_pb2.FeatureNameStatistics],
                   note: str = "") -> str:
    head, rows = _NUMERIC_HEAD, []
    kind = ""
    for split, feature in per_split.items():
        head, cells = _cells(feature, split)
        kind = statistics_pb2.FeatureNameStatistics.Type.Name(feature.type)
        rows.append(f"<tr><th>{esc(split)}</th>" + "".join(
            f'<td class="n">{c}</td>' if i < len(cells) - 1 else f"<td>{c}</td>"
            for i, c in enumerate(cells)) + "</tr>")
    header = "".join(f"<th>{esc(h)}</th>" for h in ("split", *head))
    about = f' <span class="about">{esc(note)}</span>' if note else ""
    return (f'<div class="feature"><h3>{esc(name)} <span class="type">{esc(kind)}'
            f'</span>{about}</h3><table><tr>{header}</tr>{"".join(rows)}</table></div>')


def features_html(columns: Mapping[str, statistics_pb2.DatasetFeatureStatistics],
                  notes: Mapping[str, str] | None = None) -> str:
    """A table per feature (sorted by name), a row per column (split) that has it;
    ``notes`` says beside a feature's name what it measures."""
    notes = notes or {}
    names: dict[str, dict[str, statistics_pb2.FeatureNameStatistics]] = {}
    for split, dataset in columns.items():
        for feature in dataset.features:
            names.setdefault(feature_name(feature), {})[split] = feature
    examples = ", ".join(f"{esc(split)}: {number(dataset.num_examples)}"
                         for split, dataset in columns.items())
    return (f'<p class="note">Examples described: {examples}. Counts are of examples; '
            "a histogram's buckets come from a quantiles sketch, so a count marked ≈ "
            "is an estimate, rounded.</p>"
            + "".join(_feature_table(name, names[name], notes.get(name, ""))
                      for name in sorted(names)))
