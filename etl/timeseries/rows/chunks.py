"""Rows per bucket of series: ``RowChunk``, cut from a range's rows and spilled.

Each read range cuts its parsed rows into at most one ``RowChunk`` per *bucket* of
series (``stable_hash64(series_id, "bucket") % num_buckets``) and writes them to the
range's spill file under the job's temporary directory. Only a ``ChunkRef`` (path,
byte range) crosses the grouping stage, so grouping gives the series step
(``etl/timeseries/buckets.py``) every row of whole series, a bucket at a time, while
the runner never holds the input: Beam's local runner keeps what crosses a stage in
memory, unspilled. A chunk stays compact all the same: per row a float64 time, the
float64 values and an int64 input position (about 24 bytes for one value column),
the rows of one series contiguous (a *slice*), series ids once per slice, the
timestamps as written usually a style name (``etl/timeseries/rows/time_texts.py``), and
the categorical columns as codes into the chunk's own list of their texts.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Iterable, Iterator, Sequence

import numpy as np
import pyarrow as pa

from etl.core import hashing
from etl.core.io import storage
from etl.timeseries.rows.parsed_rows import ParsedRows
from etl.timeseries.rows.time_texts import TimeTexts, detect_style

# Input bytes per bucket of series: the grouping step holds one bucket at a time.
BUCKET_INPUT_BYTES = 64 * 1024 * 1024
MAX_BUCKETS = 4096
BUCKET_SALT = "bucket"


def num_buckets(total_bytes: int) -> int:
    """Buckets of series for ``total_bytes`` of input."""
    return max(1, min(MAX_BUCKETS, math.ceil(total_bytes / BUCKET_INPUT_BYTES)))


def bucket_of(series_id: str, buckets: int) -> int:
    return hashing.stable_hash64(series_id, BUCKET_SALT) % buckets


@dataclasses.dataclass
class RowChunk:
    """Parsed rows of one input range, for the series of one bucket, in slices.

    ``series_ids[k]`` owns the next ``slice_lengths[k]`` rows (its slice),
    ``slice_kinds[k]`` is the OR of their timestamp kinds. Rows hold ``times``
    (float64: seconds since the epoch for dates, else the number), ``values``
    (float64 ``[rows, F]``, NaN = missing) and ``positions`` (file index ×
    ``POSITION_FILE_STRIDE`` + line or row number). Their timestamp texts are
    ``text_style``'s formatting of the times, or ``texts``. The last
    ``num_categoricals`` columns of ``values`` are codes: indices into ``categories``.
    """

    series_ids: list[str]
    slice_lengths: np.ndarray
    slice_kinds: np.ndarray
    times: np.ndarray
    values: np.ndarray
    positions: np.ndarray
    text_style: str | None
    texts: pa.Array | None
    categories: list[str] = dataclasses.field(default_factory=list)
    num_categoricals: int = 0

    def __len__(self) -> int:
        return len(self.times)

    def time_texts(self) -> TimeTexts:
        if self.text_style is not None:
            return TimeTexts.styled(self.text_style, self.times)
        return TimeTexts.stored(self.texts)

    def slices(self) -> Iterator[tuple[str, int, slice]]:
        """``(series id, kinds, rows)`` for every series of the chunk."""
        bounds = np.concatenate([[0], np.cumsum(self.slice_lengths)]).tolist()
        for k, series_id in enumerate(self.series_ids):
            yield series_id, int(self.slice_kinds[k]), slice(bounds[k], bounds[k + 1])


@dataclasses.dataclass(frozen=True)
class ChunkRef:
    """Where a ``RowChunk`` waits in a read range's spill file (a small record)."""

    path: str
    offset: int
    length: int
    rows: int


_ARRAYS = ("slice_lengths", "slice_kinds", "times", "values", "positions")


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
                         "arrays": layout, "texts": text_layout,
                         "categories": chunk.categories,
                         "num_categoricals": chunk.num_categoricals}).encode()
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
                    texts=texts, categories=header["categories"],
                    num_categoricals=header["num_categoricals"], **arrays)


def to_chunks(parsed: ParsedRows, buckets: int) -> Iterator[tuple[int, RowChunk]]:
    """``(bucket, RowChunk)`` for every bucket with rows; series sorted by id, each
    series' rows in input order."""
    if not len(parsed.codes):
        return
    ids = parsed.series_ids
    rank = np.empty(len(ids), np.int64)
    rank[np.argsort(np.array(ids, dtype=object))] = np.arange(len(ids))
    id_bucket = np.array([bucket_of(i, buckets) for i in ids], np.int64)
    order = np.lexsort((parsed.positions, rank[parsed.codes], id_bucket[parsed.codes]))
    codes = parsed.codes[order]
    # The range's distinct timestamps: when one style writes them all from their
    # times, the texts are left out.
    text_times = np.zeros(len(parsed.text_dictionary))
    text_times[parsed.text_codes] = parsed.times
    style = detect_style(parsed.text_dictionary, text_times,
                         int(np.bitwise_or.reduce(parsed.kinds)))
    dictionary = None if style else pa.array(parsed.text_dictionary, pa.large_string())
    slice_starts = np.flatnonzero(np.concatenate([[True], codes[1:] != codes[:-1]]))
    slice_ends = np.concatenate([slice_starts[1:], [len(codes)]])
    slice_buckets = id_bucket[codes[slice_starts]]
    slice_kinds = np.bitwise_or.reduceat(parsed.kinds[order], slice_starts)
    for bucket in np.unique(slice_buckets).tolist():
        mine = np.flatnonzero(slice_buckets == bucket)
        first, last = int(slice_starts[mine[0]]), int(slice_ends[mine[-1]])
        rows = order[first:last]
        values, categories = _own_categories(parsed, rows)
        yield bucket, RowChunk(
            series_ids=[ids[c] for c in codes[slice_starts[mine]].tolist()],
            slice_lengths=(slice_ends[mine] - slice_starts[mine]).astype(np.int64),
            slice_kinds=slice_kinds[mine].astype(np.uint8),
            times=parsed.times[rows], values=values,
            positions=parsed.positions[rows], text_style=style,
            texts=None if dictionary is None else dictionary.take(
                pa.array(parsed.text_codes[rows])),
            categories=categories, num_categoricals=parsed.num_categoricals)


def own_categories(codes: np.ndarray, categories: Sequence[str]
                   ) -> tuple[np.ndarray, list[str]]:
    """Categorical ``codes`` (any shape, indices into ``categories``) renumbered into
    the texts they use, and those texts: what a chunk or a run carries of them."""
    used, local = np.unique(codes.astype(np.int64), return_inverse=True)
    return local.reshape(codes.shape), [categories[c] for c in used.tolist()]


def _own_categories(parsed: ParsedRows, rows: np.ndarray) -> tuple[np.ndarray, list[str]]:
    """The values of ``rows``, their categorical codes renumbered (``own_categories``)."""
    values = parsed.values[rows]
    if not parsed.num_categoricals:
        return values, []
    codes, categories = own_categories(values[:, -parsed.num_categoricals:],
                                       parsed.categories)
    values[:, -parsed.num_categoricals:] = codes
    return values, categories


def spill_chunks(chunks: Iterable[tuple[int, RowChunk]], path: str
                 ) -> list[tuple[int, ChunkRef]]:
    """Writes a range's chunks to ``path`` (temporary name, then renamed) and returns
    ``(bucket, ChunkRef)`` for each; no file when there is none."""
    encoded = [(bucket, len(chunk), encode_chunk(chunk)) for bucket, chunk in chunks]
    if not encoded:
        return []
    refs = []
    offset = 0
    with storage.write(path) as out:
        for bucket, rows, data in encoded:
            out.write(data)
            refs.append((bucket, ChunkRef(path, offset, len(data), rows)))
            offset += len(data)
    return refs


def read_chunks(refs: Iterable[ChunkRef]) -> Iterator[RowChunk]:
    """The chunks ``refs`` name, read file by file in offset order."""
    by_path: dict[str, list[ChunkRef]] = {}
    for ref in refs:
        by_path.setdefault(ref.path, []).append(ref)
    for path in sorted(by_path):
        with storage.open_read(path) as f:
            for ref in sorted(by_path[path], key=lambda r: r.offset):
                f.seek(ref.offset)
                yield decode_chunk(f.read(ref.length))
