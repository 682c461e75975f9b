"""The human-readable end-of-job summary, computed from the written manifest."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from reader import contract


def _mib(num_bytes: int) -> str:
    return f"{num_bytes / (1024 * 1024):.2f} MiB"


def _label_parts(manifest: Mapping[str, Any], task: str) -> list[str]:
    """What the examples' labels are: the class count and/or the target shape."""
    parts = []
    if task in (contract.CLASSIFICATION, contract.MULTI_LABEL):
        parts.append(f"{len(manifest['label_vocab'])} labels")
    if contract.TARGET_KEY in manifest["features"]:
        parts.append(f"target shape {manifest['features'][contract.TARGET_KEY]['shape']}")
    return parts


def format_summary(output_dir: str, manifest: Mapping[str, Any], elapsed_s: float) -> str:
    """Records, shards and bytes per split, rejections, and where the output is."""
    lines = [f"Wrote dataset {manifest['name']!r} to {output_dir}",
             f"  {'split':<11}{'records':>9}{'shards':>8}{'bytes':>14}"]
    for split in contract.SPLITS:
        entry = manifest["splits"][split]
        lines.append(f"  {split:<11}{entry['num_records']:>9}{len(entry['shards']):>8}"
                     f"{_mib(entry['num_bytes']):>14}")
    rejected = manifest["rejected"]
    reasons = ", ".join(f"{r}={n}" for r, n in rejected["by_reason"].items()) or "none"
    lines.append(f"  rejected: {rejected['count']} ({reasons}); details in "
                 f"{contract.ERRORS_DIRNAME}/{contract.REJECTED_FILENAME}")
    for split, why in manifest.get("timeseries", {}).get("empty_splits", {}).items():
        lines.append(f"  {split}: no windows: {why}")
    task = manifest.get("task", contract.CLASSIFICATION)
    lines.append(f"  {manifest.get('kind', contract.IMAGES)} {task}, "
                 f"{', '.join(_label_parts(manifest, task))}; manifest: "
                 f"{output_dir.rstrip('/')}/{contract.MANIFEST_FILENAME}")
    lines.append(f"  wall time: {elapsed_s:.1f} s")
    return "\n".join(lines)
