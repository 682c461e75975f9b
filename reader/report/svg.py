"""Small inline SVG charts for the report: histograms, bars and series.

Every chart is a self-contained ``<svg>`` element (no script, no external reference)
with ``<title>`` tooltips; coordinates are written with one decimal, so the same
numbers give the same bytes.
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence

from reader.report.series import SeriesView

SPLIT_COLOURS = {"train": "#4c78a8", "validation": "#f58518", "test": "#54a24b"}
OTHER_COLOUR = "#8c8c8c"
# Points drawn per polyline at most: longer series are thinned evenly.
MAX_POLYLINE_POINTS = 1500


def esc(value: object) -> str:
    """``value`` as HTML text, quotes escaped too (every section of the report and
    every chart escapes with it)."""
    return html.escape(str(value), quote=True)


def colour(split: str) -> str:
    """The split's colour (the last path part names it: ``v00002/test`` is a test)."""
    return SPLIT_COLOURS.get(split.rsplit("/", 1)[-1], OTHER_COLOUR)


def number(value: float) -> str:
    """A statistic as shown: 4 significant digits, integers with separators."""
    if float(value).is_integer() and abs(value) < 1e15:
        return f"{int(value):,}"
    return f"{value:.4g}"


def count(value: float) -> str:
    """A count of examples as shown: a whole number. A sketch's estimate (a
    histogram's buckets come from a quantiles sketch, so they may be fractional) is
    rounded (halves up) and marked ``≈``; one under a half is ``<1``, never ``0``."""
    if float(value).is_integer():
        return number(value)
    return "<1" if value < 0.5 else f"≈{math.floor(value + 0.5):,}"


def histogram(buckets: Sequence[tuple[float, float, float]], fill: str,
              width: int = 180, height: int = 40) -> str:
    """Bars of equal width, one per ``(low, high, count)`` bucket, heights by count."""
    if not buckets:
        return ""
    top = max(examples for _, _, examples in buckets) or 1.0
    bar = width / len(buckets)
    head = (f'<svg class="hist" width="{width}" height="{height}" '
            f'viewBox="0 0 {width} {height}" role="img">')
    parts = [head]
    for i, (low, high, examples) in enumerate(buckets):
        h = (height - 2) * examples / top
        parts.append(
            f'<rect x="{i * bar + 0.5:.1f}" y="{height - 1 - h:.1f}" '
            f'width="{max(bar - 1, 0.5):.1f}" height="{h:.1f}" fill="{fill}">'
            f'<title>{esc(number(low))} to {esc(number(high))}: '
            f'{esc(_examples(examples))}</title></rect>')
    parts.append(f'<line x1="0" y1="{height - 0.5}" x2="{width}" y2="{height - 0.5}" '
                 f'stroke="#999"/></svg>')
    return "".join(parts)


def _examples(value: float) -> str:
    text = count(value)
    return f"{text} example{'' if text in ('1', '<1') else 's'}"


def bar(fraction: float, fill: str, width: int = 100, height: int = 10) -> str:
    """One horizontal bar filled to ``fraction`` (0 to 1)."""
    filled = width * min(max(fraction, 0.0), 1.0)
    return (f'<svg class="bar" width="{width}" height="{height}" role="img">'
            f'<rect width="{width}" height="{height}" fill="#eee"/>'
            f'<rect width="{filled:.1f}" height="{height}" fill="{fill}"/></svg>')


def ranked(values: Sequence[tuple[str, float]], fill: str, width: int = 240) -> str:
    """Horizontal bars for ``(value, frequency)`` pairs, the value written beside."""
    if not values:
        return ""
    top = max(f for _, f in values) or 1.0
    row = 14
    label = width * 0.45
    parts = [f'<svg class="ranked" width="{width}" height="{row * len(values)}" role="img">']
    for i, (value, frequency) in enumerate(values):
        text = value if len(value) <= 18 else value[:17] + "…"
        length = (width - label - 40) * frequency / top
        parts.append(
            f'<text x="{label - 4:.1f}" y="{i * row + 11}" text-anchor="end">'
            f'{esc(text)}</text><rect x="{label:.1f}" y="{i * row + 2}" '
            f'width="{length:.1f}" height="{row - 4}" fill="{fill}"><title>'
            f'{esc(value)}: {esc(_examples(frequency))}</title></rect>'
            f'<text x="{label + length + 3:.1f}" y="{i * row + 11}">'
            f'{esc(count(frequency))}</text>')
    parts.append("</svg>")
    return "".join(parts)


def _thinned(points: list[tuple[float, float]]) -> list[tuple[float, float]]:
    if len(points) <= MAX_POLYLINE_POINTS:
        return points
    step = len(points) / MAX_POLYLINE_POINTS
    return [points[int(i * step)] for i in range(MAX_POLYLINE_POINTS)] + [points[-1]]


def series_chart(view: SeriesView, column: int, width: int = 760,
                 height: int = 170) -> str:
    """One value column of a series: a line per split, dashed split boundaries, each
    split's earliest window shaded (its target lighter)."""
    lines = {split: [(t, float(v[column])) for t, v in pts] for split, pts in
             view.points.items() if pts}
    if not lines:
        return ""
    times = [t for pts in lines.values() for t, _ in pts]
    values = [v for pts in lines.values() for _, v in pts]
    t0, t1 = min(times), max(times)
    v0, v1 = min(values), max(values)
    pad, plot_w, plot_h = 6, width - 12, height - 30

    def x(t: float) -> float:
        return pad + plot_w * ((t - t0) / (t1 - t0) if t1 > t0 else 0.5)

    def y(v: float) -> float:
        return pad + plot_h * (1 - ((v - v0) / (v1 - v0) if v1 > v0 else 0.5))

    parts = [f'<svg class="series" width="{width}" height="{height}" role="img">']
    for split, (start, end, target_end, label) in view.windows.items():
        parts.append(f'<rect x="{x(start):.1f}" y="{pad}" width="{max(x(end) - x(start), 1):.1f}"'
                     f' height="{plot_h}" fill="{colour(split)}" opacity="0.18"><title>'
                     f'{esc(split)} window from {esc(label)}</title></rect>')
        if target_end is not None:
            parts.append(f'<rect x="{x(end):.1f}" y="{pad}" width="'
                         f'{max(x(target_end) - x(end), 1):.1f}" height="{plot_h}" '
                         f'fill="{colour(split)}" opacity="0.08"><title>its target'
                         f'</title></rect>')
    for split, pts in lines.items():
        coords = " ".join(f"{x(t):.1f},{y(v):.1f}" for t, v in _thinned(pts))
        parts.append(f'<polyline points="{coords}" fill="none" stroke="{colour(split)}" '
                     f'stroke-width="1.2"><title>{esc(split)}</title></polyline>')
        if split != next(iter(lines)):
            left = x(pts[0][0])
            parts.append(f'<line x1="{left:.1f}" y1="{pad}" x2="{left:.1f}" '
                         f'y2="{pad + plot_h}" stroke="#333" stroke-dasharray="4 3"/>'
                         f'<text x="{left + 3:.1f}" y="{pad + 10}">{esc(split)}</text>')
    first, last = view.span
    parts.append(f'<text x="{pad}" y="{height - 6}">{esc(first)}</text>'
                 f'<text x="{width / 2:.1f}" y="{height - 6}" text-anchor="middle">'
                 f'{esc(number(v0))} to {esc(number(v1))} ({esc(view.units)} units)</text>'
                 f'<text x="{width - pad}" y="{height - 6}" text-anchor="end">'
                 f'last window from {esc(last)}</text></svg>')
    return "".join(parts)
