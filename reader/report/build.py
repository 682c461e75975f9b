"""The report's data gathered from a dataset's files, and the page written
(``python -m reader.report``, whose docs are this package's).
"""

from __future__ import annotations

import argparse
import heapq
import json
import posixpath
import sys
from collections.abc import Iterator, Mapping
from typing import Any

from reader import records
from reader.format import contract
from reader.format.contract import DatasetError
from reader.report import gallery
from reader.report import samples as report_samples
from reader.report import series as report_series
from reader.report.html import Comparison, ReportData, render
from reader.stats import drift
from reader.stats import files as stats_files


def _read_optional(path: str) -> bytes | None:
    try:
        return records.read_file(path)
    except FileNotFoundError:
        return None


def _versions(manifest: dict[str, Any]) -> range:
    return range(1, int(manifest.get("dataset_version", 1)) + 1)


def read_statistics(data_dir: str, version: int = 1, series: bool = False
                    ) -> dict[str, Any] | None:
    """A version's statistics per split, or None when it has no statistics folder
    (a damaged file still raises)."""
    try:
        if not stats_files.split_names(data_dir, version, series):
            return None
    except DatasetError:
        return None
    return stats_files.read_split_statistics(data_dir, version, series)


def _all_statistics(data_dir: str, manifest: dict[str, Any], series: bool
                    ) -> dict[str, Any] | None:
    """Every version's statistics, by column: the split, or ``vNNNNN/split`` when
    another version than the first has statistics."""
    found = {v: s for v in _versions(manifest)
             if (s := read_statistics(data_dir, v, series))}
    if not found:
        return None
    plain = list(found) == [1]
    return {(split if plain else f"v{version:05d}/{split}"): stats
            for version, per_split in found.items() for split, stats in per_split.items()}


def _statistics_file_lines(data_dir: str, manifest: dict[str, Any], name: str
                           ) -> list[bytes] | None:
    """The contents of ``statistics[/vNNNNN]/<name>`` of every version that has it."""
    found = [text for v in _versions(manifest) if (text := _read_optional(posixpath.join(
        data_dir, contract.statistics_dir(v), name))) is not None]
    return found or None


def read_drift(data_dir: str, manifest: dict[str, Any]) -> list[dict[str, Any]] | None:
    """Every version's ``drift.json`` entries (None: no such file)."""
    texts = _statistics_file_lines(data_dir, manifest, contract.DRIFT_FILENAME)
    return None if texts is None else drift.sort_entries(
        entry for text in texts for entry in json.loads(text))


def read_flags(data_dir: str, manifest: dict[str, Any]) -> list[dict[str, Any]] | None:
    """Every version's ``flags.jsonl`` entries, by key (None: no such file)."""
    texts = _statistics_file_lines(data_dir, manifest, contract.FLAGS_FILENAME)
    if texts is None:
        return None
    entries = [json.loads(line) for text in texts for line in text.splitlines()
               if line.strip()]
    return sorted(entries, key=lambda e: (e["key"], e.get("split", "")))


def read_duplicates(data_dir: str, manifest: dict[str, Any]) -> dict[str, Any] | None:
    """``duplicates/summary.json``, else the manifest's copy (None: no report)."""
    text = _read_optional(posixpath.join(data_dir, contract.DUPLICATES_SUMMARY_RELPATH))
    return json.loads(text) if text is not None else manifest.get("duplicates")


# The strongest kinds first: equal bytes, equal pixels, then near by distance.
_PAIR_KINDS = ("bytes", "pixels", "near")


def read_cross_split_pairs(data_dir: str, summary: Mapping[str, Any] | None
                           ) -> gallery.CrossSplitPairs | None:
    """The pairs of ``duplicates/pairs.jsonl`` whose two splits differ, the first
    :data:`gallery.MAX_PAIRS_SHOWN` by kind, distance and keys, and how many
    there are (None: no duplicate report, or no such file). The file is streamed, not
    held."""
    if not summary:
        return None
    path = posixpath.join(data_dir, contract.DUPLICATE_PAIRS_RELPATH)
    try:
        stream = records.open_file(path)
    except FileNotFoundError:
        return None
    total = 0

    def crossing() -> Iterator[dict[str, Any]]:
        nonlocal total
        with stream:
            for line in stream:
                if line.strip() and (pair := json.loads(line))["split_a"] != pair["split_b"]:
                    total += 1
                    yield pair

    shown = heapq.nsmallest(gallery.MAX_PAIRS_SHOWN, crossing(), key=lambda p: (
        _PAIR_KINDS.index(p["kind"]) if p["kind"] in _PAIR_KINDS else len(_PAIR_KINDS),
        p.get("distance", 0), p["key_a"], p["key_b"]))
    return gallery.CrossSplitPairs(shown, total)


def _wanted_keys(flags: list[dict[str, Any]] | None,
                 pairs: gallery.CrossSplitPairs | None) -> dict[str, list[str]]:
    """``{split: [key, ...]}`` of the images shown besides the samples: the flagged
    ones and both of each pair."""
    wanted: dict[str, list[str]] = {}
    for entry in (flags or [])[:gallery.MAX_FLAGGED_SHOWN]:
        wanted.setdefault(entry.get("split", ""), []).append(entry["key"])
    for pair in pairs.shown if pairs else []:
        for side in ("a", "b"):
            wanted.setdefault(pair[f"split_{side}"], []).append(pair[f"key_{side}"])
    return wanted


def _comparison(data_dir: str, other_dir: str) -> Comparison:
    other = records.load_manifest(other_dir)
    mine, theirs = read_statistics(data_dir), read_statistics(other_dir)
    entries = None
    if mine and theirs:
        name = other.get("name", "compared")
        entries = drift.sort_entries(
            entry for split in mine if split in theirs
            for entry in drift.compare(theirs[split], mine[split], split=split,
                                       baseline=f"{name}/{split}"))
    return Comparison(other_dir, other, entries)


def gather(data_dir: str, compare: str | None = None) -> ReportData:
    """Reads what the page shows (see the module docstring)."""
    data_dir = data_dir.rstrip("/")
    manifest = records.load_manifest(data_dir)
    images = manifest.get("kind", contract.IMAGES) == contract.IMAGES
    flags = read_flags(data_dir, manifest) if images else None
    duplicates = read_duplicates(data_dir, manifest) if images else None
    pairs = read_cross_split_pairs(data_dir, duplicates)
    wanted = _wanted_keys(flags, pairs)
    return ReportData(
        data_dir=data_dir, manifest=manifest,
        statistics=_all_statistics(data_dir, manifest, series=False),
        series_statistics=None if images else _all_statistics(data_dir, manifest, True),
        drift=read_drift(data_dir, manifest),
        duplicates=duplicates,
        flags=flags,
        pairs=pairs,
        images=report_samples.scan_images(data_dir, manifest, wanted) if images else None,
        series=None if images else report_series.series_views(data_dir, manifest),
        comparison=_comparison(data_dir, compare.rstrip("/")) if compare else None)


def write_report(data_dir: str, out: str | None = None, compare: str | None = None) -> str:
    """Writes the report of ``data_dir`` (default ``DATA_DIR/report/index.html``).

    Args:
        data_dir: a finished dataset (local or a URI).
        out: where to write the page (local or a URI).
        compare: another dataset to set beside it (the drift baseline).

    Returns:
        The path written.

    Raises:
        FileNotFoundError: no manifest (the job did not finish).
        DatasetError: a statistics file or shard is damaged.
    """
    out = out or posixpath.join(data_dir.rstrip("/"), contract.REPORT_RELPATH)
    records.write_file(out, render(gather(data_dir, compare)).encode("utf-8"))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m reader.report",
        description="Writes a dataset's self-contained HTML report.")
    parser.add_argument("data_dir")
    parser.add_argument("--compare", metavar="OTHER_DIR",
                        help="Another dataset (e.g. an earlier version) to set beside it; "
                             "the baseline of the drift between the two.")
    parser.add_argument("--out", help=f"Where to write (default DATA_DIR/"
                                      f"{contract.REPORT_RELPATH}).")
    args = parser.parse_args(argv)
    try:
        path = write_report(args.data_dir, args.out, args.compare)
    except (FileNotFoundError, DatasetError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(f"wrote {path}")
    return 0

