"""The report's pictures: sample images per class or drawn series, flagged images
and the two images of each duplicate pair across splits."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from reader.format import contract
from reader.report import svg
from reader.report.samples import ImageFinds
from reader.report.series import SeriesView
from reader.report.svg import esc, number
from reader.report.tables import figure, table

# cleanvision's issue names in its order; names outside it follow, sorted.
FLAG_ORDER = contract.QUALITY_FLAGS
# Flagged images shown at most; the rest are counted and left to flags.jsonl.
MAX_FLAGGED_SHOWN = 500
# Duplicate pairs across splits shown at most (strongest kind, then smallest distance
# first); the rest are counted and left to pairs.jsonl.
MAX_PAIRS_SHOWN = 24
SERIES_COLUMNS_SHOWN = 3


def image_samples_html(finds: ImageFinds) -> str:
    """A block of thumbnails per class (train), the blocks side by side."""
    parts = []
    for name, thumbnails in finds.samples.items():
        title = name if name else "first images"
        parts.append(f'<div class="class"><h3>{esc(title)}</h3>' + (
            f'<div class="grid">{"".join(figure(t) for t in thumbnails)}</div>'
            if thumbnails else '<p class="note">No train image of this class.</p>')
            + "</div>")
    return f'<div class="classes">{"".join(parts)}</div>'


def series_samples_html(views: Sequence[SeriesView]) -> str:
    """Each drawn series: a chart per value column, splits coloured, windows shaded."""
    if not views:
        return '<p class="note">No window was stored.</p>'
    legend = " ".join(f'<span style="color:{svg.colour(s)}">■ {esc(s)}</span>'
                      for s in contract.SPLITS)
    note = (f'<p class="note">{legend}; the shaded band is each split\'s earliest window, '
            "the lighter one its target.</p>")
    parts = [note]
    for view in views:
        for column, name in enumerate(view.columns[:SERIES_COLUMNS_SHOWN]):
            parts.append(f"<h3>{esc(view.series_id)}: {esc(name)}</h3>"
                         + svg.series_chart(view, column))
        if len(view.columns) > SERIES_COLUMNS_SHOWN:
            parts.append(f'<p class="note">{len(view.columns) - SERIES_COLUMNS_SHOWN} more '
                         f"columns not drawn.</p>")
    return "".join(parts)


def flag_names(entries: Sequence[Mapping[str, Any]]) -> list[str]:
    """The flags that occur, in :data:`FLAG_ORDER`, then others sorted."""
    seen = {flag for entry in entries for flag in entry.get("flags", [])}
    return [f for f in FLAG_ORDER if f in seen] + sorted(seen.difference(FLAG_ORDER))


def _flag_counts(entries: Sequence[Mapping[str, Any]], splits: Sequence[str]) -> str:
    names = flag_names(entries)
    rows = [[esc(name)] + [number(sum(1 for e in entries if e.get("split") == split
                                      and name in e.get("flags", []))) for split in splits]
            for name in names]
    rows.append(["<b>flagged images</b>"] + [
        number(sum(1 for e in entries if e.get("split") == split)) for split in splits])
    return table(["flag", *splits], rows)


def _value_text(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def flag_caption(entry: Mapping[str, Any]) -> str:
    """The flags of one entry and the values that raised them, escaped."""
    values = entry.get("values", {})
    shown = [f"{flag} ({_value_text(values[flag])})" if flag in values else flag
             for flag in entry.get("flags", [])]
    return f'\n<span class="flags">{esc(", ".join(shown))}</span>'


def _label_text(label: Any) -> str:
    if label is None:
        return ""
    return ", ".join(label) if isinstance(label, list) else str(label)


def flags_html(entries: Sequence[Mapping[str, Any]] | None, finds: ImageFinds | None,
               splits: Sequence[str], source: str) -> str:
    """Counts per flag and split, then every flagged image (up to
    :data:`MAX_FLAGGED_SHOWN`) as a thumbnail captioned with its flags."""
    if entries is None:
        return ('<p class="note absent">Image-quality flags: not in this dataset '
                f"(no {esc(source)}).</p>")
    if not entries:
        return '<p class="note">No image was flagged.</p>'
    figures = []
    for entry in entries[:MAX_FLAGGED_SHOWN]:
        thumbnail = (finds.by_key.get(entry["key"]) if finds else None)
        if thumbnail is None:
            figures.append(f'<figure><figcaption>{esc(entry["key"])}\n{esc(entry.get("split", ""))}'
                           f"\n{esc(_label_text(entry.get('label')))} (not found in the shards)"
                           f"{flag_caption(entry)}</figcaption></figure>")
            continue
        figures.append(figure(thumbnail, flag_caption(entry)))
    more = len(entries) - MAX_FLAGGED_SHOWN
    tail = (f'<p class="note">{number(more)} more flagged images are not shown: every one '
            f"is in {esc(source)}.</p>" if more > 0 else "")
    return (_flag_counts(entries, splits) + f'<div class="grid">{"".join(figures)}</div>'
            + tail)


@dataclasses.dataclass(frozen=True)
class CrossSplitPairs:
    """The duplicate pairs across splits the report shows.

    Attributes:
        shown: ``pairs.jsonl`` entries (``kind``, ``distance``, ``key_a``,
            ``split_a``, ``label_a``, ``key_b``, ...), at most :data:`MAX_PAIRS_SHOWN`.
        total: every pair across splits the file holds.
    """

    shown: list[dict[str, Any]]
    total: int


def _pair_figure(pair: Mapping[str, Any], side: str, finds: ImageFinds | None,
                 dropped: bool) -> str:
    key = pair[f"key_{side}"]
    thumbnail = finds.by_key.get(key) if finds else None
    if thumbnail is not None:
        return figure(thumbnail)
    why = "removed from the dataset" if dropped else "not found in the shards"
    return (f"<figure><figcaption>{esc(key)}\n{esc(pair[f'split_{side}'])}\n"
            f"{esc(_label_text(pair.get(f'label_{side}')))} ({why})</figcaption></figure>")


def pairs_html(pairs: CrossSplitPairs, finds: ImageFinds | None, source: str,
               dropped: bool = False) -> str:
    """Each duplicate pair across splits, its two images side by side with its kind
    and distance (Hamming bits between the perceptual hashes); ``dropped``: the job
    removed the copies (``--cross_split_duplicates=drop``), so one is not stored."""
    if not pairs.total:
        return '<p class="note">No duplicate pair crosses splits.</p>'
    parts = []
    for pair in pairs.shown:
        differ = (' <span class="flags">labels differ</span>'
                  if pair.get("label_a") != pair.get("label_b") else "")
        parts.append(f'<div class="pair"><p>{esc(pair["kind"])}, distance '
                     f'{number(pair.get("distance", 0))}{differ}</p><div class="grid">'
                     f'{_pair_figure(pair, "a", finds, dropped)}'
                     f'{_pair_figure(pair, "b", finds, dropped)}'
                     f"</div></div>")
    more = pairs.total - len(pairs.shown)
    tail = (f'<p class="note">{number(more)} more {"pair is" if more == 1 else "pairs are"}'
            f" not shown: every pair is in {esc(source)}.</p>" if more > 0 else "")
    return (f"<h3>Pairs across splits ({number(pairs.total)})</h3>"
            f'<div class="pairs">{"".join(parts)}</div>{tail}')
