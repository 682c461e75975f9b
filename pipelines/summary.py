"""The human-readable end-of-job summary, computed from the written manifest."""

from __future__ import annotations

import dataclasses
import resource
from collections.abc import Mapping
from typing import Any

from etl.core import cores
from reader.format import contract


@dataclasses.dataclass(frozen=True)
class RunCounts:
    """What a run's steps counted: shards kept from the interrupted run it resumed,
    shards transformed and written, the inputs those held, and (``--append``) the
    listed inputs the dataset already held."""

    kept: int = 0
    transformed: int = 0
    inputs_transformed: int = 0
    already_held: int = 0


def run_counts(result: Any) -> RunCounts | None:
    """The counters of a finished pipeline (None where the runner reports none)."""
    from apache_beam.metrics.metric import MetricsFilter

    from etl.core import dead_letters
    from etl.core.run import resume, versions

    try:
        counters = result.metrics().query(
            MetricsFilter().with_namespace(dead_letters.METRICS_NAMESPACE))["counters"]
    except (AttributeError, NotImplementedError, KeyError):
        return None
    totals: dict[str, int] = {}
    for counter in counters:
        name = counter.key.metric.name
        totals[name] = totals.get(name, 0) + (counter.committed or 0)
    return RunCounts(kept=totals.get(resume.SHARDS_KEPT_COUNTER, 0),
                     transformed=totals.get(resume.SHARDS_TRANSFORMED_COUNTER, 0),
                     inputs_transformed=totals.get(resume.UNITS_TRANSFORMED_COUNTER, 0),
                     already_held=totals.get(versions.HELD_COUNTER, 0))


def format_nothing_new(output_dir: str, manifest: Mapping[str, Any],
                       counts: RunCounts | None) -> str:
    """The one line of an append that found no input the dataset lacks."""
    held = f" (all {counts.already_held} listed inputs)" if counts else ""
    return (f"Nothing to append: the dataset in {output_dir} (version "
            f"{manifest.get('dataset_version', 1)}) already holds every input{held}; "
            f"nothing was written.")


def _mib(num_bytes: int) -> str:
    return f"{num_bytes / (1024 * 1024):.2f} MiB"


# A split with fewer examples of a class than this is warned about: a class's recall
# there moves by 20 points or more per example, too coarse to compare models by.
MIN_EXAMPLES_PER_CLASS = 5
# The time-series cleaning counts the summary names, in this order (docs/FORMAT.md);
# rows it rejects are in the rejected line.
_CLEANING = (
    ("rows_merged_duplicates", "row(s) merged as duplicates"),
    ("values_filled", "value(s) filled"),
    ("rows_dropped_missing", "row(s) dropped for a missing value"),
    ("gaps_split", "cut(s) at a gap"),
    ("rows_missing_known", "row(s) cut out for a missing known covariate"),
)


def _split_lines(manifest: Mapping[str, Any]) -> list[str]:
    """Records, shards and bytes per split, with each split's share of the records
    next to the share ``--split_fractions`` asked (``-`` where --split_times cut the
    splits)."""
    splits = manifest["splits"]
    total = sum(splits[split]["num_records"] for split in contract.SPLITS)
    preprocessing = manifest.get("preprocessing", {})
    asked = ({} if preprocessing.get("split_times") else
             preprocessing.get("split_fractions") or {})
    lines = [(f"  {'split':<11}{'records':>9}{'shards':>8}{'bytes':>14}{'share':>7}"
              f"{'asked':>7}")]
    for split in contract.SPLITS:
        entry = splits[split]
        share = f"{entry['num_records'] / total:.2f}" if total else "-"
        wanted = f"{asked[split]:.2f}" if split in asked else "-"
        lines.append(f"  {split:<11}{entry['num_records']:>9}{len(entry['shards']):>8}"
                     f"{_mib(entry['num_bytes']):>14}{share:>7}{wanted:>7}")
    if asked and manifest.get("kind") == contract.IMAGES:
        # The manifest does not say how many images a split folder or column placed.
        lines.append("  (asked: --split_fractions, for the images that no split folder "
                     "or split column placed)")
    return lines


def _cleaning_line(manifest: Mapping[str, Any]) -> list[str]:
    """What the time-series cleaning did to the rows, from the manifest's counts."""
    entry = manifest.get("timeseries")
    if entry is None:
        return []
    counts = entry.get("counts", {})
    cleaning = manifest.get("preprocessing", {}).get("cleaning", {})
    flags = {"values_filled": "missing", "gaps_split": "max_gap"}
    done = []
    for key, what in _CLEANING:
        if counts.get(key):
            flag = flags.get(key)
            extra = f" (--{flag}={cleaning[flag]})" if flag in cleaning else ""
            done.append(f"{counts[key]} {what}{extra}")
    nothing = "none (no duplicate timestamp, missing value or gap)"
    return [f"  cleaning: {', '.join(done) if done else nothing}"]


def _few_examples_lines(manifest: Mapping[str, Any]) -> list[str]:
    """One warning naming each class with fewer than ``MIN_EXAMPLES_PER_CLASS``
    examples in a split that holds records (classification and multi-label only)."""
    if manifest.get("task", contract.CLASSIFICATION) not in (contract.CLASSIFICATION,
                                                             contract.MULTI_LABEL):
        return []
    vocab = manifest.get("label_vocab") or []
    label_counts = manifest.get("label_counts", {})
    few = []
    for split in contract.SPLITS:
        if not manifest["splits"][split]["num_records"]:
            continue
        counts = label_counts.get(split, {})
        few += [f"{split} {label!r} {counts.get(label, 0)}" for label in vocab
                if counts.get(label, 0) < MIN_EXAMPLES_PER_CLASS]
    if not few:
        return []
    shown = ", ".join(few[:8]) + (f" and {len(few) - 8} more" if len(few) > 8 else "")
    return [(f"WARNING: fewer than {MIN_EXAMPLES_PER_CLASS} examples of a class in a "
             f"split ({shown}): metrics of those classes there rest on a "
             f"handful of examples; give the split more data (--split_fractions) or "
             f"merge rare classes.")]


def _label_parts(manifest: Mapping[str, Any], task: str) -> list[str]:
    """What the examples' labels are: the class count and/or the target shape."""
    parts = []
    if task in (contract.CLASSIFICATION, contract.MULTI_LABEL):
        parts.append(f"{len(manifest['label_vocab'])} labels")
    if contract.TARGET_KEY in manifest["features"]:
        parts.append(f"target shape {manifest['features'][contract.TARGET_KEY]['shape']}")
    return parts


def _duplicate_lines(report: Mapping[str, Any] | None) -> list[str]:
    """The duplicate report's counts, and one warning line when pairs cross splits."""
    if not report:
        return []
    totals = {kind: sum(counts.values()) for kind, counts in report["pairs"].items()}
    removed = sum(report["removed"].values())
    lines = [f"  duplicates: {totals['bytes']} byte, {totals['pixels']} pixel, "
             f"{totals['near']} near pair(s); {report['cross_split_pairs']} across splits"
             + (f", {removed} removed (drop)" if removed else "")
             + f"; details in {contract.DUPLICATE_PAIRS_RELPATH}"]
    if report["cross_split_pairs"]:
        crossing = ", ".join(
            f"{name} {sum(counts[name] for counts in report['pairs'].values())}"
            for name in report["pairs"]["bytes"]
            if name.split("-")[0] != name.split("-")[1]
            and any(counts[name] for counts in report["pairs"].values()))
        if report["mode"] == "drop":
            lines.append(f"WARNING: {report['cross_split_pairs']} duplicate pair(s) "
                         f"crossed splits ({crossing}); --cross_split_duplicates=drop "
                         f"removed {removed} copies (the train copy, or the validation "
                         f"copy of a test image).")
        else:
            lines.append(f"WARNING: {report['cross_split_pairs']} duplicate pair(s) cross "
                         f"splits ({crossing}): evaluation there sees images the model "
                         f"trains on; --cross_split_duplicates=drop removes the train "
                         f"copies.")
    return lines


def _statistics_lines(entry: Mapping[str, Any] | None) -> list[str]:
    """Where the statistics are, the quality flags' counts, drift over its threshold,
    and (an appended version) what breaks the dataset's schema."""
    if not entry:
        return []
    lines = [(f"  statistics: {contract.statistics_dir(entry['version'])}/ (TFDV format), "
             f"report: {contract.REPORT_RELPATH}")]
    flags = entry.get("flags")
    if flags is not None:
        counts = ", ".join(f"{name} {n}" for name, n in flags["counts"].items() if n)
        lines.append(f"  quality flags: {flags['images']} image(s)"
                     + (f" ({counts})" if counts else "") + f"; details in {flags['file']}")
    if entry["drift_over"]:
        shown = "; ".join(entry["drift_over"][:5])
        more = len(entry["drift_over"]) - 5
        lines.append(f"WARNING: drift over threshold in {len(entry['drift_over'])} "
                     f"comparison(s): {shown}" + (f"; and {more} more" if more > 0 else "")
                     + f" (details in {entry['drift']})")
    for anomaly in entry.get("anomalies", ()):
        lines.append(f"WARNING: {anomaly['split']}: {anomaly['description']}")
    return lines


def cpu_seconds() -> float:
    """CPU seconds of this process and of its children it has waited for (the local
    runner's worker processes, with ``--direct_running_mode=multi_processing``)."""
    return sum(usage.ru_utime + usage.ru_stime for usage in (
        resource.getrusage(resource.RUSAGE_SELF),
        resource.getrusage(resource.RUSAGE_CHILDREN)))


@dataclasses.dataclass(frozen=True)
class CoresUsed:
    """A run's CPU seconds on this machine over its wall seconds: the cores it kept
    busy on average, against the cores the process may run on."""

    cpu_s: float
    wall_s: float
    available: int = dataclasses.field(default_factory=cores.usable)

    def line(self) -> str:
        busy = self.cpu_s / self.wall_s if self.wall_s > 0 else 0.0
        return (f"  cores: {busy:.1f} busy on average of the {self.available} this "
                f"process may use ({self.cpu_s:.1f} s of CPU in {self.wall_s:.1f} s)")


def format_summary(output_dir: str, manifest: Mapping[str, Any], elapsed_s: float,
                   counts: RunCounts | None = None, cores: CoresUsed | None = None) -> str:
    """Records, shards, bytes and share of the records per split (with the share
    asked), a warning for classes with few examples in a split, rejections, what the
    time-series cleaning did, what a resumed run kept, where the output is, the wall
    time and (for a run whose work ran here) the cores it kept busy."""
    lines = [f"Wrote dataset {manifest['name']!r} to {output_dir}",
             *_split_lines(manifest)]
    lines.extend(_few_examples_lines(manifest))
    rejected = manifest["rejected"]
    reasons = ", ".join(f"{r}={n}" for r, n in rejected["by_reason"].items()) or "none"
    files = (contract.REJECTED_FILENAME if manifest.get("dataset_version", 1) == 1
             else "rejected*.jsonl (one file per version)")
    lines.append(f"  rejected: {rejected['count']} ({reasons}); details in "
                 f"{contract.ERRORS_DIRNAME}/{files}")
    lines.extend(_cleaning_line(manifest))
    lines.extend(_duplicate_lines(manifest.get("duplicates")))
    lines.extend(_statistics_lines(manifest.get("statistics")))
    for split, why in manifest.get("timeseries", {}).get("empty_splits", {}).items():
        lines.append(f"  {split}: no windows: {why}")
    task = manifest.get("task", contract.CLASSIFICATION)
    lines.append(f"  {manifest.get('kind', contract.IMAGES)} {task}, "
                 f"{', '.join(_label_parts(manifest, task))}; manifest: "
                 f"{output_dir.rstrip('/')}/{contract.MANIFEST_FILENAME}")
    version = manifest.get("dataset_version", 1)
    if version > 1:
        added = manifest["history"][-1]
        lines.append(f"  version {version} added {added['inputs']} inputs: "
                     f"{sum(added['written'].values())} written, {added['rejected']} "
                     f"rejected" + (f"; {counts.already_held} listed inputs were already "
                                    f"in the dataset" if counts else ""))
    if counts is not None and counts.kept:
        lines.append(f"  resumed: {counts.kept} shard(s) kept from the interrupted "
                     f"run, {counts.transformed} transformed "
                     f"({counts.inputs_transformed} inputs)")
    lines.append(f"  wall time: {elapsed_s:.1f} s")
    if cores is not None:
        lines.append(cores.line())
    return "\n".join(lines)
