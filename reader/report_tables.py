"""The report's tables: counts, labels, drift, duplicates and dead letters, and the
escaping and table helpers every section uses."""

from __future__ import annotations

import html
import re
from collections.abc import Mapping, Sequence
from typing import Any

from reader import contract, drift, report_svg
from reader.report_samples import Thumbnail
from reader.report_svg import number

# Cells that hold one number (or "—") are right-aligned.
_NUMERIC = re.compile(r"[-+]?(\d[\d,]*(\.\d+)?(e[-+]?\d+)?|inf|nan)%?|—")


def esc(value: object) -> str:
    """``value`` as HTML text, quotes escaped too."""
    return html.escape(str(value), quote=True)


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
                       + report_svg.bar(count / total, report_svg.colour(split)))
        rows.append(row)
    return table(["label", *splits], rows)


def _verdict(entry: Mapping[str, Any]) -> str:
    if entry["over"]:
        return "OVER"
    return "not judged" if entry.get("judged") is False else "ok"


def drift_table(entries: Sequence[Mapping[str, Any]]) -> str:
    """Drift entries (over threshold first, highlighted)."""
    if not entries:
        return '<p class="note">No feature was compared.</p>'
    ordered = sorted(entries, key=lambda e: (not e["over"], e["split"], e["baseline"],
                                             e["feature"], e["comparator"]))
    rows = [[esc(e["split"]), esc(e["baseline"]), esc(e["feature"]), esc(e["comparator"]),
             "—" if e["distance"] is None else esc(f"{e['distance']:.6g}"),
             "—" if e["threshold"] is None else esc(f"{e['threshold']:.6g}"),
             _verdict(e)] for e in ordered]
    over = sum(1 for e in entries if e["over"])
    unjudged = sum(1 for e in entries if e.get("judged") is False)
    note = f"{number(over)} of {number(len(entries))} over their threshold."
    if unjudged:
        note += (f" {number(unjudged)} not judged: a side has fewer than "
                 f"{number(drift.MIN_EXAMPLES)} examples, too few for a distance to mean "
                 f"drift.")
    return (f'<p class="note">{note}</p>' + table(
        ["split", "baseline", "feature", "comparator", "distance", "threshold", "over"],
        rows, ["over" if e["over"] else "" for e in ordered]))


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
