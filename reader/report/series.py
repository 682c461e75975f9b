"""A few time series put back together from their stored windows, for the report.

Each window holds ``W`` rows ``stride`` rows apart from ``window_start``, and its
target the ``H`` rows after them; windows of one piece start ``shift`` rows apart. So
a row's place in time is its window's start plus its row offset times the series'
step, taken as the smallest distance between two of its window starts divided by
``shift`` (exact whenever two neighbouring windows were read). Values are shown in
the input's units (the manifest's ``normalisation`` undone, ``x = z * std + mean``)
where the manifest has the statistics, else as stored.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Mapping
from typing import Any

import numpy as np

from reader.format import contract
from reader.report.samples import (
    MAX_WINDOWS_PER_SPLIT,
    SERIES_SHOWN,
    feature_text,
    feature_values,
    split_records,
)


@dataclasses.dataclass(frozen=True)
class Window:
    """One stored window: its start (as written in the input) and values
    (``[W, F]``; target ``[H, F]`` or None), in the units the report shows."""

    start: str
    values: np.ndarray
    target: np.ndarray | None


@dataclasses.dataclass(frozen=True)
class SeriesView:
    """One series as drawn: per split, ``(time, value)`` points of each column, and
    the first window of each split with its span.

    Attributes:
        series_id: the series.
        columns: the window's channels, ``column (role)`` (``F``).
        points: split → ``[(time, values [F])]`` sorted by time.
        windows: split → ``(window start time, window end time, target end time or
            None, the start as written)`` of its earliest window read.
        units: ``"input"`` or ``"normalised"``.
        span: the earliest and the latest window start read, as written.
    """

    series_id: str
    columns: list[str]
    points: dict[str, list[tuple[float, np.ndarray]]]
    windows: dict[str, tuple[float, float, float | None, str]]
    units: str
    span: tuple[str, str] = ("", "")


def time_value(text: str) -> float | None:
    """A timestamp as written in the input → a number (ISO dates: seconds since the
    epoch, naive = UTC); None if it is neither a number nor an ISO date."""
    try:
        return float(text)
    except ValueError:
        pass
    try:
        moment = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.UTC)
    return moment.timestamp()


def channels(manifest: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The stored ``window``'s channels in order, as ``(column, role)``: with column
    roles the manifest's ``column_roles.blocks.window`` (targets, then past
    covariates); else the value columns, each a target when forecasting (its next
    rows are the target) and a value when classifying series."""
    roles = manifest.get("preprocessing", {}).get("column_roles")
    if roles:
        role_of = {name: role for role, key in (("target", "targets"), ("past", "past"))
                   for name in roles.get(key, [])}
        names = roles.get("blocks", {}).get(contract.WINDOW_KEY, {}).get("channels", [])
        return [(name, role_of.get(name, "")) for name in names]
    role = "target" if manifest.get("task") == contract.FORECAST else "value"
    return [(name, role) for name in manifest.get("timeseries", {}).get("value_columns", [])]


def channel_names(manifest: Mapping[str, Any], width: int) -> list[str]:
    """Each window channel as the report names it, ``column (role)``; ``value f``
    where the manifest does not name ``width`` channels."""
    named = channels(manifest)
    if len(named) != width:
        return [f"value {f}" for f in range(width)]
    return [f"{name} ({role})" if role else name for name, role in named]


def _denormaliser(manifest: Mapping[str, Any], num_columns: int
                  ) -> tuple[np.ndarray, np.ndarray, str]:
    """Per window channel, the mean and std that undo its z-score, and the units the
    values are then in. ``normalisation`` follows ``column_roles.statistics_columns``
    with column roles (a target under ``log1p`` stays in its transformed units),
    else the value columns."""
    normalisation = manifest.get("normalisation", {})
    mean = np.asarray(normalisation.get("mean", []), np.float64)
    std = np.asarray(normalisation.get("std", []), np.float64)
    roles = manifest.get("preprocessing", {}).get("column_roles") or {}
    order = list(roles.get("statistics_columns", []))
    names = [name for name, _ in channels(manifest)]
    if order and len(order) == len(mean) and set(names) <= set(order):
        picked = [order.index(name) for name in names]
        mean, std = mean[picked], std[picked]
    if normalisation.get("per_series", True) or len(mean) != num_columns:
        return np.zeros(num_columns), np.ones(num_columns), "normalised"
    if roles.get("target_transform", "none") != "none":
        return mean, std, f"input, {roles['target_transform']} targets"
    return mean, std, "input"


def _window(manifest: Mapping[str, Any], example: Any) -> Window:
    shapes = manifest["features"]
    window_shape = [int(d) for d in shapes[contract.WINDOW_KEY]["shape"]]
    values = np.asarray(feature_values(example, contract.WINDOW_KEY), np.float64).reshape(
        window_shape)
    mean, std, _ = _denormaliser(manifest, values.shape[1])
    target = None
    if contract.TARGET_KEY in shapes and manifest.get("task") == contract.FORECAST:
        target_shape = [int(d) for d in shapes[contract.TARGET_KEY]["shape"]]
        targets = target_shape[-1]  # the window's first channels (column roles)
        if targets <= values.shape[1]:
            target = (np.asarray(feature_values(example, contract.TARGET_KEY), np.float64
                                 ).reshape(target_shape) * std[:targets] + mean[:targets])
    return Window(feature_text(example, contract.WINDOW_START_KEY), values * std + mean, target)


def read_windows(data_dir: str, manifest: Mapping[str, Any]
                 ) -> dict[str, dict[str, list[Window]]]:
    """series id → split → its windows, for the first :data:`SERIES_SHOWN` series met
    in train (then the other splits), reading at most :data:`MAX_WINDOWS_PER_SPLIT`
    windows of each split."""
    chosen: dict[str, dict[str, list[Window]]] = {}
    for split in contract.ordered_splits(manifest["splits"]):
        for count, example in enumerate(split_records(data_dir, manifest, split)):
            if count >= MAX_WINDOWS_PER_SPLIT:
                break
            series_id = feature_text(example, contract.SERIES_ID_KEY)
            if series_id not in chosen and len(chosen) < SERIES_SHOWN:
                chosen[series_id] = {}
            if series_id in chosen:
                chosen[series_id].setdefault(split, []).append(_window(manifest, example))
    return chosen


def _times(starts: list[str], shift: int) -> tuple[dict[str, float], float]:
    """Each start's time and the series' step between rows."""
    unique = sorted(set(starts))
    parsed = {s: time_value(s) for s in unique}
    if any(t is None for t in parsed.values()):
        # Neither numbers nor dates: place the windows in the order of their starts.
        return {s: float(i * shift) for i, s in enumerate(unique)}, 1.0
    times = sorted(set(parsed.values()))
    gaps = np.diff(times)
    gaps = gaps[gaps > 0]
    return parsed, float(gaps.min()) / shift if len(gaps) else 1.0


def series_view(manifest: Mapping[str, Any], series_id: str,
                windows: Mapping[str, list[Window]]) -> SeriesView:
    """The points and window spans of one series from its windows."""
    geometry = manifest.get("timeseries", {})
    shift, stride = int(geometry.get("shift", 1)), int(geometry.get("stride", 1))
    first = next(iter(windows.values()))[0]
    width = first.values.shape[1]
    columns = channel_names(manifest, width)
    starts = [w.start for ws in windows.values() for w in ws]
    times, step = _times(starts, shift)
    points: dict[str, list[tuple[float, np.ndarray]]] = {}
    spans: dict[str, tuple[float, float, float | None, str]] = {}
    for split, split_windows in windows.items():
        at: dict[float, np.ndarray] = {}
        for window in split_windows:
            start = times[window.start]
            for row, values in enumerate(window.values):
                at[start + row * stride * step] = values
        points[split] = sorted(at.items(), key=lambda item: item[0])
        head = min(split_windows, key=lambda w: (times[w.start], w.start))
        rows = head.values.shape[0]
        end = times[head.start] + (rows - 1) * stride * step
        target_end = None if head.target is None else (
            end + head.target.shape[0] * stride * step)
        spans[split] = (times[head.start], end, target_end, head.start)
    _, _, units = _denormaliser(manifest, width)
    ordered = sorted(starts, key=lambda s: (times[s], s))
    return SeriesView(series_id, columns, points, spans, units, (ordered[0], ordered[-1]))


def series_views(data_dir: str, manifest: Mapping[str, Any]) -> list[SeriesView]:
    """The series the report draws, by series id."""
    return [series_view(manifest, series_id, windows)
            for series_id, windows in sorted(read_windows(data_dir, manifest).items())
            if windows]
