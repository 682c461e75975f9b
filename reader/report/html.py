"""The report's HTML: one self-contained page, a section per subject.

Every section has a stable id (:data:`SECTION_IDS`, in page order); a page has the
sections that apply to its dataset (:func:`section_ids`: ``compare`` first with a
second dataset, no labels without classes, no duplicates or flags for a time series),
and a subject the dataset lacks renders one line saying so. Styles are inline,
charts inline SVG, images ``data:`` URIs, and the page's Content-Security-Policy
forbids loading anything else, so it renders the same offline. Every text from the
data is escaped; iteration is in sorted or manifest order and nothing depends on
the clock, so the same dataset gives the same bytes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from tensorflow_metadata.proto.v0 import statistics_pb2

from reader.format import contract
from reader.report.features import IMAGE_FEATURE_NOTES, features_html
from reader.report.gallery import (
    CrossSplitPairs,
    flags_html,
    image_samples_html,
    pairs_html,
    series_samples_html,
)
from reader.report.samples import ImageFinds
from reader.report.series import SeriesView
from reader.report.svg import esc, number
from reader.report.tables import (
    absent,
    counts_html,
    drift_table,
    duplicates_html,
    label_names,
    labels_html,
    rejected_html,
    settings_html,
    table,
)

# Every section a page may have, in page order.
SECTION_IDS: tuple[str, ...] = ("compare", "counts", "settings", "labels", "features",
                                "drift", "duplicates", "rejected", "samples", "flags")
_CSS = """
body{font:14px/1.4 sans-serif;margin:0 24px 40px;color:#222;background:#fff}
h1{font-size:22px;margin:16px 0 4px}h2{font-size:18px;border-bottom:1px solid #ccc;
padding-bottom:2px;margin-top:28px}h3{font-size:15px;margin:14px 0 4px}
nav a{margin-right:10px}table{border-collapse:collapse;margin:6px 0}
th,td{border:1px solid #ddd;padding:2px 6px;text-align:left;vertical-align:middle}
th{background:#f4f4f4}td.n{text-align:right}.note{color:#555}
tr.over td{background:#fde0dc;font-weight:bold}.type{color:#777;font-weight:normal}
.grid{display:flex;flex-wrap:wrap;gap:8px}figure{margin:0;width:104px;font-size:11px}
figure img{width:64px;height:64px;image-rendering:pixelated;display:block}
figcaption{word-break:break-all;white-space:pre-line}.flags{color:#b00020}
svg text{font:10px sans-serif;fill:#333}.feature{margin-bottom:10px}
.classes{display:flex;flex-wrap:wrap;gap:4px 28px}.about{color:#777;font-weight:normal;
font-size:12px}.pairs{display:flex;flex-wrap:wrap;gap:10px 24px}.pair{border:1px solid #ddd;
padding:4px 8px}.pair p{margin:0 0 4px;font-size:12px}summary{cursor:pointer;margin:6px 0}
"""
_CSP = ("default-src 'none'; img-src data:; style-src 'unsafe-inline'; "
        "base-uri 'none'; form-action 'none'")


@dataclasses.dataclass(frozen=True)
class Comparison:
    """A second dataset beside the first (``--compare``).

    Attributes:
        data_dir: where it is; manifest: its manifest.
        drift: entries of ``reader.stats.drift.compare`` between the same splits (the other
            dataset the baseline), or None where a side has no statistics.
    """

    data_dir: str
    manifest: Mapping[str, Any]
    drift: list[dict[str, Any]] | None


@dataclasses.dataclass(frozen=True)
class ReportData:
    """Everything the page shows (None: the dataset does not have it).

    Attributes:
        data_dir: the dataset; manifest: its manifest.
        statistics: column (split, ``vNNNNN/split`` for appended versions) → stats.
        series_statistics: the same, one example per series (time series).
        drift: ``statistics/drift.json`` entries (every version's).
        duplicates: ``duplicates/summary.json``.
        flags: ``statistics/flags.jsonl`` entries (every version's).
        pairs: the duplicate pairs across splits shown (``duplicates/pairs.jsonl``).
        images: thumbnails of samples, flagged images and the images of the pairs
            shown (image datasets).
        series: series drawn (time series).
        comparison: the ``--compare`` dataset.
    """

    data_dir: str
    manifest: Mapping[str, Any]
    statistics: Mapping[str, statistics_pb2.DatasetFeatureStatistics] | None = None
    series_statistics: Mapping[str, statistics_pb2.DatasetFeatureStatistics] | None = None
    drift: list[dict[str, Any]] | None = None
    duplicates: Mapping[str, Any] | None = None
    flags: list[dict[str, Any]] | None = None
    pairs: CrossSplitPairs | None = None
    images: ImageFinds | None = None
    series: list[SeriesView] | None = None
    comparison: Comparison | None = None


def _section(section_id: str, title: str, body: str) -> str:
    return f'<section id="{section_id}"><h2>{esc(title)}</h2>{body}</section>'


def _statistics_files(version_dir: str) -> str:
    return f"{version_dir}/<split>{contract.STATISTICS_SUFFIX}"


def features_section(data: ReportData) -> str:
    """Per-feature statistics of the rows (and of the series, for time series)."""
    if not data.statistics:
        return absent(f"Per-feature statistics ({_statistics_files(contract.STATISTICS_DIRNAME)})")
    images = data.manifest.get("kind", contract.IMAGES) == contract.IMAGES
    body = features_html(data.statistics, IMAGE_FEATURE_NOTES if images else None)
    if images and data.manifest.get("preprocessing", {}).get("image_size"):
        stored = data.manifest["preprocessing"]
        body = (f'<p class="note">width, height, megapixels, aspect_ratio and file_bytes '
                f'are the source files\'; every stored image is '
                f'{number(stored["image_size"])} x {number(stored["image_size"])} '
                f'{esc(stored.get("image_format", ""))}.</p>' + body)
    if data.series_statistics:
        body += "<h3>Per series</h3>" + features_html(data.series_statistics)
    return body


def _compare_counts(manifest: Mapping[str, Any], other: Mapping[str, Any]) -> str:
    splits = contract.ordered_splits([*manifest.get("splits", {}), *other.get("splits", {})])
    rows = []
    for split in splits:
        mine = manifest.get("splits", {}).get(split, {}).get("num_records", 0)
        theirs = other.get("splits", {}).get(split, {}).get("num_records", 0)
        rows.append([esc(split), number(mine), number(theirs), esc(f"{mine - theirs:+,}")])
    return table(["split", "this dataset", "compared with", "difference"], rows)


def _compare_labels(manifest: Mapping[str, Any], other: Mapping[str, Any]) -> str:
    names = label_names(manifest)
    names += [n for n in label_names(other) if n not in names]
    if not names:
        return absent("Labels")
    splits = contract.ordered_splits(set(manifest.get("splits", {})) & set(other.get("splits", {})))
    mine, theirs = manifest.get("label_counts", {}), other.get("label_counts", {})
    rows = [[esc(name)] + [f"{number(mine.get(s, {}).get(name, 0))} / "
                           f"{number(theirs.get(s, {}).get(name, 0))}" for s in splits]
            for name in names]
    return ('<p class="note">Each cell: this dataset / the compared one.</p>'
            + table(["label", *splits], rows))


def compare_section(data: ReportData) -> str:
    """Counts and labels of both datasets side by side, and drift between them."""
    comparison = data.comparison
    drift = (drift_table(comparison.drift) if comparison.drift is not None
             else absent("Statistics on both sides (drift needs them)"))
    return (f'<p class="note">Compared with {esc(comparison.data_dir)} '
            f'({esc(comparison.manifest.get("name", ""))}), the baseline of the drift '
            f"below.</p><h3>Records per split</h3>"
            + _compare_counts(data.manifest, comparison.manifest)
            + "<h3>Labels per split</h3>" + _compare_labels(data.manifest, comparison.manifest)
            + "<h3>Drift from the compared dataset</h3>" + drift)


def _samples_section(data: ReportData) -> str:
    if data.manifest.get("kind", contract.IMAGES) == contract.IMAGES:
        return image_samples_html(data.images) if data.images else absent("Images")
    return series_samples_html(data.series or [])


def section_ids(manifest: Mapping[str, Any], compare: bool = False) -> tuple[str, ...]:
    """The sections that apply to a dataset, in page order: the comparison first
    when there is one; labels only with classes; duplicates and flags only for
    images."""
    images = manifest.get("kind", contract.IMAGES) == contract.IMAGES
    skipped = {"compare"} if not compare else set()
    if not label_names(manifest):
        skipped.add("labels")
    if not images:
        skipped.update(("duplicates", "flags"))
    return tuple(s for s in SECTION_IDS if s not in skipped)


def _duplicates_section(data: ReportData) -> str:
    body = duplicates_html(data.duplicates)
    if data.pairs is not None:
        body += pairs_html(data.pairs, data.images, contract.DUPLICATE_PAIRS_RELPATH,
                           dropped=data.duplicates.get("mode") == "drop")
    return body


def _sections(data: ReportData) -> list[tuple[str, str, str]]:
    """``(id, title, body)`` of every section that applies, in page order."""
    images = data.manifest.get("kind", contract.IMAGES) == contract.IMAGES
    flags_source = f"{contract.STATISTICS_DIRNAME}/{contract.FLAGS_FILENAME}"
    drift_source = f"{contract.STATISTICS_DIRNAME}/{contract.DRIFT_FILENAME}"
    splits = contract.ordered_splits(data.manifest.get("splits", {}))
    sections = {
        "compare": ("Compared with another dataset",
                    lambda: compare_section(data)),
        "counts": ("Records per split", lambda: counts_html(data.manifest)),
        "settings": ("Run settings", lambda: settings_html(data.manifest)),
        "labels": ("Labels per split", lambda: labels_html(data.manifest)),
        "features": ("Features per split", lambda: features_section(data)),
        "drift": ("Drift between splits", lambda: drift_table(data.drift, drift_source)
                  if data.drift is not None else absent(f"Drift ({drift_source})")),
        "duplicates": ("Duplicates", lambda: _duplicates_section(data)),
        "rejected": ("Rejected inputs", lambda: rejected_html(data.manifest)),
        "samples": ("Samples" if images else "Series", lambda: _samples_section(data)),
        "flags": ("Flagged images", lambda: flags_html(data.flags, data.images, splits,
                                                        flags_source)),
    }
    return [(sid, sections[sid][0], sections[sid][1]())
            for sid in section_ids(data.manifest, data.comparison is not None)]


def render(data: ReportData) -> str:
    """The whole page."""
    manifest = data.manifest
    name = manifest.get("name", data.data_dir)
    sections = _sections(data)
    nav = "".join(f'<a href="#{sid}">{esc(title)}</a>' for sid, title, _ in sections)
    facts = ", ".join(esc(v) for v in (manifest.get("kind", contract.IMAGES),
                                       manifest.get("task", ""),
                                       f"version {manifest.get('dataset_version', 1)}") if v)
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f'<meta http-equiv="Content-Security-Policy" content="{_CSP}">'
            '<meta name="viewport" content="width=device-width, initial-scale=1">'
            f'<link rel="icon" href="data:,"><title>{esc(name)}: dataset report</title>'
            f"<style>{_CSS}</style></head><body><header><h1>{esc(name)}</h1>"
            f'<p class="note">{esc(data.data_dir)}: {facts}</p><nav>{nav}</nav></header>'
            + "".join(_section(*s) for s in sections) + "</body></html>\n")
