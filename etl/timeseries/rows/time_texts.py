"""Timestamps as written, kept cheaply: a style that rewrites them from the times.

The texts (``window_start``, dead-letter keys) are usually a fixed format of the time
itself, e.g. ``2012-01-01 00:00:00``; then only the format's name is kept and any
row's text is regenerated from its time (``TimeTexts``), else the texts are stored.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np
import pyarrow as pa

# Timestamp kinds (``etl.timeseries.rows.sources.NUMERIC`` / ``DATETIME``) as bits, so a
# series' set of kinds is the OR of its rows'.
NUMERIC_BIT = 1
DATETIME_BIT = 2

_DATE_SECONDS = 86_400
# Largest integer a float64 holds exactly: integral times beyond it are not "int" style.
_MAX_EXACT_INT = 2**53


def _iso_seconds(times: np.ndarray) -> np.ndarray:
    return np.datetime_as_string(times.astype("datetime64[s]"), unit="s")


def _format_int(times: np.ndarray) -> list[str]:
    return [str(t) for t in times.astype(np.int64).tolist()]


def _format_date(times: np.ndarray) -> list[str]:
    return np.datetime_as_string(times.astype("datetime64[s]").astype("datetime64[D]"),
                                 unit="D").tolist()


def _format_t(times: np.ndarray) -> list[str]:
    return _iso_seconds(times).tolist()


def _format_space(times: np.ndarray) -> list[str]:
    return [text.replace("T", " ") for text in _iso_seconds(times).tolist()]


def _format_tz(times: np.ndarray) -> list[str]:
    return [text + "Z" for text in _iso_seconds(times).tolist()]


# style name → formatter of float64 times (seconds since the epoch for datetimes).
_FORMATTERS = {
    "int": _format_int,                      # 17, -3, 20240102
    "date": _format_date,                    # 2024-01-02
    "iso_t": _format_t,                      # 2024-01-02T03:04:05
    "iso_space": _format_space,              # 2024-01-02 03:04:05
    "iso_z": _format_tz,                     # 2024-01-02T03:04:05Z
}
_DATETIME_STYLES = ("date", "iso_t", "iso_space", "iso_z")


def format_times(style: str, times: np.ndarray) -> list[str]:
    """The texts ``style`` writes for ``times``."""
    return _FORMATTERS[style](np.asarray(times, np.float64))


def detect_style(texts: Sequence[str], times: np.ndarray, kinds: int) -> str | None:
    """The style that writes exactly ``texts`` (the distinct timestamps of a range)
    from their ``times``, or None when no single style does.

    Only whole seconds within years 1-9999 qualify, so a formatter never meets a time
    it cannot write.
    """
    times = np.asarray(times, np.float64)
    if not len(texts) or kinds not in (NUMERIC_BIT, DATETIME_BIT):
        return None
    if not (np.all(np.floor(times) == times) and np.all(np.abs(times) < _MAX_EXACT_INT)):
        return None
    if kinds == NUMERIC_BIT:
        candidates: tuple[str, ...] = ("int",)
    else:
        # datetime64 years 1..9999 only: what fromisoformat itself accepts.
        if not np.all((times >= -62_135_596_800) & (times < 253_402_300_800)):
            return None
        candidates = _DATETIME_STYLES
        if not np.all(times % _DATE_SECONDS == 0):
            candidates = candidates[1:]
    texts = list(texts)
    for style in candidates:
        if format_times(style, times) == texts:
            return style
    return None


class TimeTexts(Sequence[str]):
    """Each row's timestamp as written: stored strings, or a style and the times.

    Example:
        >>> texts = TimeTexts.styled("iso_space", np.array([0.0, 3600.0]))
        >>> list(texts)
        ['1970-01-01 00:00:00', '1970-01-01 01:00:00']
    """

    def __init__(self, style: str | None, times: np.ndarray | None,
                 strings: pa.Array | None) -> None:
        if (style is None) == (strings is None):
            raise ValueError("TimeTexts holds either a style or strings.")
        self._style = style
        self._times = times
        self._strings = strings

    @classmethod
    def styled(cls, style: str, times: np.ndarray) -> TimeTexts:
        return cls(style, np.asarray(times, np.float64), None)

    @classmethod
    def stored(cls, strings: pa.Array | Sequence[str]) -> TimeTexts:
        if not isinstance(strings, pa.Array):
            strings = pa.array(list(strings), pa.large_string())
        return cls(None, None, strings.cast(pa.large_string()))

    @property
    def style(self) -> str | None:
        return self._style

    def __len__(self) -> int:
        return len(self._times) if self._style is not None else len(self._strings)

    def __getitem__(self, index):  # type: ignore[override]
        if isinstance(index, slice):
            return self.take(np.arange(len(self))[index])
        if self._style is not None:
            return format_times(self._style, self._times[[index]])[0]
        return self._strings[index].as_py()

    def __iter__(self) -> Iterator[str]:
        return iter(self.strings())

    def strings(self) -> list[str]:
        """Every text, materialised."""
        if self._style is not None:
            return format_times(self._style, self._times)
        return self._strings.to_pylist()

    def take(self, index: np.ndarray) -> TimeTexts:
        """The texts of rows ``index`` (an integer array)."""
        index = np.asarray(index, np.int64)
        if self._style is not None:
            return TimeTexts(self._style, self._times[index], None)
        return TimeTexts(None, None, self._strings.take(pa.array(index)))

    @staticmethod
    def concat(parts: Sequence[TimeTexts]) -> TimeTexts:
        """The rows of ``parts`` in order; one style if they share it, else stored."""
        styles = {part.style for part in parts}
        if len(styles) == 1 and None not in styles:
            return TimeTexts(parts[0].style, np.concatenate([p._times for p in parts]),
                             None)
        arrays = [p._strings if p.style is None
                  else pa.array(p.strings(), pa.large_string()) for p in parts]
        if not arrays:
            return TimeTexts.stored([])
        return TimeTexts(None, None, pa.concat_arrays(arrays))
