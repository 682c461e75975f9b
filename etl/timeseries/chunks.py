"""Columnar time-series rows between the read step and the series step: ``RowChunk``.

The time-series job reads each input range into arrays (``etl/timeseries/read.py``)
and hands each bucket of series all its rows (``etl/timeseries/buckets.py``). The
rows wait in the read range's spill file under the job's temporary directory; only
a ``ChunkRef`` (path, byte range) crosses the grouping stage, so the runner never
holds the input. A chunk stays compact all the same: per row a float64 time, the
float64 values and an int64 input position (about 24 bytes for one value column),
rows of one series contiguous, series ids once per run. The timestamps as written
(``window_start``, dead-letter keys) are usually a fixed format of the time itself,
e.g. ``2012-01-01 00:00:00``; then only the format's name is kept (``TimeTexts``
regenerates any row's text from its time), else the texts are.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator, Sequence

import numpy as np
import pyarrow as pa

# Timestamp kinds (``etl.timeseries.sources.NUMERIC`` / ``DATETIME``) as bits, so a
# series' set of kinds is the OR of its chunks'.
NUMERIC_BIT = 1
DATETIME_BIT = 2

# A row's input position: file index × POSITION_FILE_STRIDE + line (or row) number.
POSITION_FILE_STRIDE = 1 << 40

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


@dataclasses.dataclass
class RowChunk:
    """Parsed rows of one input range, for the series of one bucket, grouped by series.

    ``series_ids[k]`` owns the next ``run_lengths[k]`` rows, ``run_kinds[k]`` the OR
    of their timestamp kinds. Rows hold ``times`` (float64: seconds since the epoch
    for dates, else the number), ``values`` (float64 ``[rows, F]``, NaN = missing)
    and ``positions`` (file index × ``POSITION_FILE_STRIDE`` + line or row number).
    Their timestamp texts are ``text_style``'s formatting of the times, or ``texts``.
    """

    series_ids: list[str]
    run_lengths: np.ndarray
    run_kinds: np.ndarray
    times: np.ndarray
    values: np.ndarray
    positions: np.ndarray
    text_style: str | None
    texts: pa.Array | None

    def __len__(self) -> int:
        return len(self.times)

    def time_texts(self) -> TimeTexts:
        if self.text_style is not None:
            return TimeTexts.styled(self.text_style, self.times)
        return TimeTexts.stored(self.texts)

    def runs(self) -> Iterator[tuple[str, int, slice]]:
        """``(series id, kinds, rows)`` for every run."""
        bounds = np.concatenate([[0], np.cumsum(self.run_lengths)]).tolist()
        for k, series_id in enumerate(self.series_ids):
            yield series_id, int(self.run_kinds[k]), slice(bounds[k], bounds[k + 1])


@dataclasses.dataclass(frozen=True)
class ChunkRef:
    """Where a ``RowChunk`` waits in a read range's spill file (a small record)."""

    path: str
    offset: int
    length: int
    rows: int


_ARRAYS = ("run_lengths", "run_kinds", "times", "values", "positions")


def encode_chunk(chunk: RowChunk) -> bytes:
    """``chunk`` as bytes: a JSON header (ids, style, array layouts), then the arrays'
    little-endian bytes, then the stored texts (UTF-8 blob and int64 ends)."""
    arrays = [np.ascontiguousarray(getattr(chunk, name)) for name in _ARRAYS]
    arrays = [a.astype(a.dtype.newbyteorder("<"), copy=False) for a in arrays]
    parts = [a.tobytes() for a in arrays]
    layout = [[a.dtype.str, list(a.shape), len(p)] for a, p in zip(arrays, parts,
                                                                   strict=True)]
    text_layout = None
    if chunk.texts is not None:
        texts = [t.encode() for t in chunk.texts.to_pylist()]
        blob = b"".join(texts)
        ends = np.cumsum([len(t) for t in texts], dtype="<i8")
        parts += [blob, ends.tobytes()]
        text_layout = [len(blob), len(texts)]
    header = json.dumps({"series_ids": chunk.series_ids, "text_style": chunk.text_style,
                         "arrays": layout, "texts": text_layout}).encode()
    return b"".join([len(header).to_bytes(8, "little"), header, *parts])


def decode_chunk(data: bytes) -> RowChunk:
    """The ``RowChunk`` ``encode_chunk`` wrote."""
    size = int.from_bytes(data[:8], "little")
    header = json.loads(data[8:8 + size])
    at = 8 + size
    arrays = {}
    for name, (dtype, shape, length) in zip(_ARRAYS, header["arrays"], strict=True):
        arrays[name] = np.frombuffer(data, dtype, int(np.prod(shape, dtype=np.int64)),
                                     at).reshape(shape)
        at += length
    texts = None
    if header["texts"] is not None:
        blob_length, count = header["texts"]
        blob = data[at:at + blob_length]
        ends = np.frombuffer(data, "<i8", count, at + blob_length).tolist()
        texts = pa.array([blob[a:b].decode() for a, b in zip([0, *ends[:-1]], ends,
                                                             strict=True)],
                         pa.large_string())
    return RowChunk(series_ids=header["series_ids"], text_style=header["text_style"],
                    texts=texts, **arrays)
