"""The report's tables: counts, labels, drift, duplicates and dead letters, and the
table helpers every section uses."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from reader.format import contract
from reader.report import svg
from reader.report.samples import Thumbnail
from reader.report.svg import esc, number
from reader.stats import drift

# Cells that hold one number (or "—") are right-aligned.
_NUMERIC = re.compile(r"[-+]?(\d[\d,]*(\.\d+)?(e[-+]?\d+)?|inf|nan)%?|—")


def absent(what: str) -> str:
    """One line saying the dataset lacks ``what``."""
    return f'<p class="note absent">{esc(what)}: not in this dataset.</p>'


def table(head: Sequence[str], rows: Sequence[Sequence[str]],
          row_classes: Sequence[str] = ()) -> str:
    """A table of already-escaped cells; cells holding one number are right-aligned."""
    header = "".join(f"<th>{esc(h)}</th>" for h in head)
    body = []
    for i, row in enumerate(rows):
        kind = f' class="{row_classes[i]}"' if i < len(row_classes) and row_classes[i] else ""
        cells = "".join(f'<td class="n">{cell}</td>' if _NUMERIC.fullmatch(cell)
                        else f"<td>{cell}</td>" for cell in row)
        body.append(f"<tr{kind}>{cells}</tr>")
    return f"<table><tr>{header}</tr>{''.join(body)}</table>"


def counts_html(manifest: Mapping[str, Any]) -> str:
    """Records, shards and bytes per split; inputs and rejected."""
    splits = manifest.get("splits", {})
    splits = {split: splits[split] for split in contract.ordered_splits(splits)}
    rows = [[esc(split), number(s.get("num_records", 0)), number(len(s.get("shards", []))),
             number(s.get("num_bytes", 0))] for split, s in splits.items()]
    rows.append(["<b>total</b>", number(sum(s.get("num_records", 0) for s in splits.values())),
                 number(sum(len(s.get("shards", [])) for s in splits.values())),
                 number(sum(s.get("num_bytes", 0) for s in splits.values()))])
    rejected = manifest.get("rejected", {}).get("count", 0)
    facts = [f"inputs {number(manifest.get('inputs', 0))}", f"rejected {number(rejected)}",
             f"dataset version {number(manifest.get('dataset_version', 1))}"]
    counts = manifest.get("timeseries", {}).get("counts", {})
    facts += [f"{esc(name)} {number(value)}" for name, value in sorted(counts.items())]
    return (table(["split", "records", "shards", "bytes"], rows)
            + f'<p class="note">{"; ".join(facts)}.</p>')


def label_names(manifest: Mapping[str, Any]) -> list[str]:
    """Vocabulary order, then names only outside train (sorted)."""
    vocab = list(manifest.get("label_vocab") or [])
    seen = {n for counts in manifest.get("label_counts", {}).values() for n in counts}
    return vocab + sorted(seen.difference(vocab))


def labels_html(manifest: Mapping[str, Any]) -> str:
    """Per label, its count and share in each split, side by side."""
    counts = manifest.get("label_counts", {})
    names = label_names(manifest)
    if not names:
        return absent("Labels")
    splits = contract.ordered_splits(manifest.get("splits", {}))
    rows = []
    for name in names:
        row = [esc(name)]
        for split in splits:
            count = counts.get(split, {}).get(name, 0)
            total = manifest["splits"][split].get("num_records", 0) or 1
            row.append(f"{number(count)} ({100 * count / total:.1f}%) "
                       + svg.bar(count / total, svg.colour(split)))
        rows.append(row)
    return table(["label", *splits], rows)


def _verdict(entry: Mapping[str, Any]) -> str:
    if entry["over"]:
        return "OVER"
    return "not judged" if entry.get("judged") is False else "ok"


def _unjudged_line(entries: Sequence[Mapping[str, Any]], source: str | None) -> str:
    """The comparisons not judged, in one line: how many per split and baseline."""
    per_pair: dict[tuple[str, str], int] = {}
    for e in entries:
        per_pair[(e["split"], e["baseline"])] = per_pair.get((e["split"], e["baseline"]), 0) + 1
    pairs = ", ".join(f"{esc(split)} vs {esc(baseline)} ({number(n)} "
                      f"feature{'' if n == 1 else 's'})"
                      for (split, baseline), n in sorted(per_pair.items()))
    where = f"; every distance is in {esc(source)}" if source else ""
    return (f'<p class="note unjudged">{number(len(entries))} not judged: {pairs}. A side '
            f"has fewer than {number(drift.MIN_EXAMPLES)} examples, too few for a "
            f"distance to mean drift{where}.</p>")


def drift_table(entries: Sequence[Mapping[str, Any]], source: str | None = None) -> str:
    """Drift entries judged (over threshold first, highlighted), then those not
    judged summed up in one line (naming ``source``, the file that lists them)."""
    if not entries:
        return '<p class="note">No feature was compared.</p>'
    judged = [e for e in entries if e.get("judged") is not False]
    unjudged = [e for e in entries if e.get("judged") is False]
    ordered = sorted(judged, key=lambda e: (not e["over"], e["split"], e["baseline"],
                                            e["feature"], e["comparator"]))
    rows = [[esc(e["split"]), esc(e["baseline"]), esc(e["feature"]), esc(e["comparator"]),
             "—" if e["distance"] is None else esc(f"{e['distance']:.6g}"),
             "—" if e["threshold"] is None else esc(f"{e['threshold']:.6g}"),
             _verdict(e)] for e in ordered]
    over = sum(1 for e in entries if e["over"])
    parts = []
    if ordered:
        parts.append(f'<p class="note">{number(over)} of {number(len(judged))} judged '
                     f"over their threshold.</p>")
        parts.append(table(
            ["split", "baseline", "feature", "comparator", "distance", "threshold", "over"],
            rows, ["over" if e["over"] else "" for e in ordered]))
    if unjudged:
        parts.append(_unjudged_line(unjudged, source))
    return "".join(parts)


# column_roles' entries that name columns, in the order of a row's values.
_ROLES = ("targets", "past", "known", "static_real", "known_categorical",
          "static_categorical", "calendar_features")


def _setting_text(value: Any) -> str:
    """A setting as JSON would write it, without the punctuation; splits in order."""
    if isinstance(value, dict):
        names = contract.ordered_splits(value) if set(value) <= set(contract.SPLITS) \
            else list(value)
        return ", ".join(f"{k} {_setting_text(value[k])}" for k in names)
    if isinstance(value, list | tuple):
        return ", ".join(_setting_text(v) for v in value) if value else "none"
    if value is None:
        return "none"
    return json.dumps(value) if isinstance(value, bool) else str(value)


def _is_rule(value: Any) -> bool:
    """A setting written as a sentence (the rules in words), not a value."""
    return isinstance(value, str) and len(value) > 40 and " " in value


def settings_html(manifest: Mapping[str, Any]) -> str:
    """The run's settings (``preprocessing``, recorded verbatim: nested entries as
    ``entry.name``; the rules in words folded away), the time-series columns by role
    and the libraries' versions."""
    settings: list[tuple[str, Any]] = []
    for name, value in sorted(manifest.get("preprocessing", {}).items()):
        if name == "column_roles":
            continue
        if isinstance(value, dict) and name != "split_fractions":
            settings += [(f"{name}.{k}", v) for k, v in sorted(value.items())]
        else:
            settings.append((name, value))
    values = [[esc(k), esc(_setting_text(v))] for k, v in settings if not _is_rule(v)]
    rules = [[esc(k), esc(v)] for k, v in settings if _is_rule(v)]
    parts = [table(["setting", "value"], values) if values
             else absent("Settings (the manifest's preprocessing)")]
    if rules:
        parts.append(f"<details><summary>The rules in words ({number(len(rules))})"
                     f"</summary>{table(['rule', 'what the job does'], rules)}</details>")
    roles = manifest.get("preprocessing", {}).get("column_roles")
    if roles:
        rows = [[esc(role), esc(", ".join(roles[role]))] for role in _ROLES if roles.get(role)]
        rows.append(["target_transform", esc(roles.get("target_transform", "none"))])
        parts.append("<h3>Columns by role</h3>" + table(["role", "columns"], rows))
    versions = manifest.get("versions", {})
    parts.append("<h3>Library versions</h3>" + (table(
        ["library", "version"], [[esc(k), esc(v)] for k, v in sorted(versions.items())])
        if versions else absent("Library versions")))
    return "".join(parts)


def _pairs_table(pairs: Mapping[str, Mapping[str, int]]) -> str:
    found = {p for counts in pairs.values() for p in counts}
    split_pairs = [f"{a}-{b}" for i, a in enumerate(contract.SPLITS)
                   for b in contract.SPLITS[i:] if f"{a}-{b}" in found]
    split_pairs += sorted(found.difference(split_pairs))
    rows = [[esc(kind)] + [number(pairs[kind].get(p, 0)) for p in split_pairs]
            for kind in pairs]
    return table(["kind", *split_pairs], rows)


def duplicates_html(summary: Mapping[str, Any] | None) -> str:
    """The duplicate report's headline numbers and pairs per kind and split pair."""
    if not summary:
        return absent("A duplicate report")
    exact = summary.get("exact_groups", {})
    disagreements = summary.get("label_disagreements", {})
    facts = [("mode", esc(summary.get("mode", ""))),
             ("images compared", number(summary.get("images", 0))),
             ("blank images", number(summary.get("blank_images", 0))),
             ("pairs across splits", number(summary.get("cross_split_pairs", 0))),
             ("groups of equal pixels", number(exact.get("groups", 0))),
             ("images in them", number(exact.get("images", 0))),
             ("label disagreements", number(sum(disagreements.values()))),
             ("removed", number(sum(summary.get("removed", {}).values())))]
    return (table(["", "count"], [[esc(k), v] for k, v in facts])
            + _pairs_table(summary.get("pairs", {}))
            + f'<p class="note">Every pair: {esc(contract.DUPLICATE_PAIRS_RELPATH)}.</p>')


def rejected_html(manifest: Mapping[str, Any]) -> str:
    """Dead letters per reason (most first), with the manifest's examples."""
    rejected = manifest.get("rejected", {})
    by_reason = rejected.get("by_reason", {})
    if not by_reason:
        return '<p class="note">No input was rejected.</p>'
    examples = rejected.get("examples", {})
    rows = [[esc(reason), number(count), "<br>".join(
        f"{esc(e.get('key', ''))}: {esc(e.get('message', ''))}"
        for e in examples.get(reason, []))]
        for reason, count in sorted(by_reason.items(), key=lambda kv: (-kv[1], kv[0]))]
    path = f"{contract.ERRORS_DIRNAME}/{contract.REJECTED_FILENAME}"
    return (table(["reason", "count", "examples"], rows)
            + f'<p class="note">Every dead letter: {esc(path)}.</p>')


def figure(thumbnail: Thumbnail, extra: str = "") -> str:
    """One thumbnail with its key, split, caption and ``extra`` (escaped HTML)."""
    caption = "\n".join(p for p in (esc(thumbnail.key), esc(thumbnail.split),
                                    esc(thumbnail.caption)) if p)
    return (f'<figure><img src="{esc(thumbnail.uri)}" alt="{esc(thumbnail.key)}">'
            f"<figcaption>{caption}{extra}</figcaption></figure>")
