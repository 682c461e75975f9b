"""Serialized ``tf.train.Example``s of time-series windows, built as byte arrays.

Byte for byte what ``etl.examples.serialize_example`` (protobuf with
``deterministic=True``) writes for the same instance, tested so: the proto's wire
format with the feature map in that serializer's order. Examples whose strings have
the same lengths (in practice: nearly all of a dataset) share one layout, so they
are rows of one ``uint8`` matrix assembled by column slices, with no per-example
protobuf work; a protobuf object per window cost more than the rest of the job's
per-window work together.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence

import numpy as np

from etl import contract


def _varint(value: int) -> bytes:
    """Protobuf base-128 varint of an int64 (negative: its 64-bit two's complement)."""
    value &= (1 << 64) - 1
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _field(tag: int, payload_length: int) -> bytes:
    """Tag byte and length prefix of a length-delimited field."""
    return bytes([tag]) + _varint(payload_length)


# Wire tags: field 1 / 2 / 3, wire type 2 (length-delimited).
_TAG1, _TAG2, _TAG3 = 0x0A, 0x12, 0x1A


@dataclasses.dataclass(frozen=True)
class _Piece:
    """One part of an example: constant bytes, or a named per-example column."""

    constant: bytes = b""
    column: str | None = None


def _entry(name: str, feature: list[_Piece], feature_length: int) -> tuple[list[_Piece], int]:
    """A map entry ``{key: name, value: feature}`` wrapped as a Features.feature item."""
    key = name.encode()
    inner_length = len(_field(_TAG1, len(key))) + len(key) + len(
        _field(_TAG2, feature_length)) + feature_length
    head = _field(_TAG1, inner_length) + _field(_TAG1, len(key)) + key + _field(
        _TAG2, feature_length)
    return [_Piece(head), *feature], len(_field(_TAG1, inner_length)) + inner_length


def _bytes_feature(column: str, length: int) -> tuple[list[_Piece], int]:
    values = _field(_TAG1, length)
    bytes_list_length = len(values) + length
    head = _field(_TAG1, bytes_list_length) + values
    return [_Piece(head), _Piece(column=column)], len(
        _field(_TAG1, bytes_list_length)) + bytes_list_length


def _float_feature(column: str, count: int) -> tuple[list[_Piece], int]:
    packed = _field(_TAG1, 4 * count)
    float_list_length = len(packed) + 4 * count
    head = _field(_TAG2, float_list_length) + packed
    return [_Piece(head), _Piece(column=column)], len(
        _field(_TAG2, float_list_length)) + float_list_length


def _int_feature(column: str, varint_length: int) -> tuple[list[_Piece], int]:
    int_list_length = len(_field(_TAG1, varint_length)) + varint_length
    head = _field(_TAG3, int_list_length) + _field(_TAG1, varint_length)
    return [_Piece(head), _Piece(column=column)], len(head) + varint_length


def _map_order(name: str) -> bytes:
    """Where protobuf's deterministic serialization (upb) puts a map key: by bytes, a
    key before its own prefixes ("window_start" before "window"). UTF-8 never holds
    0xFF, so the appended byte sorts a prefix after every longer key it starts."""
    return name.encode() + b"\xff"


@dataclasses.dataclass(frozen=True)
class WindowSchema:
    """The stored window example (docs/FORMAT.md): ``window`` ``[W, F]``, then
    ``target`` ``[H, F]`` or ``label`` + ``label_name``, ``series_id``,
    ``window_start`` and ``key`` (``<series_id>@<window_start>``)."""

    window_size: int
    horizon: int
    num_features: int
    classification: bool

    def _layout(self, series_bytes: int, start_bytes: int, label_bytes: int,
                label_id_bytes: int) -> list[_Piece]:
        features: dict[str, tuple[list[_Piece], int]] = {
            contract.SOURCE_KEY: _bytes_feature("key", series_bytes + 1 + start_bytes),
            contract.SERIES_ID_KEY: _bytes_feature("series_id", series_bytes),
            contract.WINDOW_KEY: _float_feature(
                "window", self.window_size * self.num_features),
            contract.WINDOW_START_KEY: _bytes_feature("window_start", start_bytes),
        }
        if self.classification:
            features[contract.LABEL_KEY] = _int_feature("label", label_id_bytes)
            features[contract.LABEL_NAME_KEY] = _bytes_feature("label_name", label_bytes)
        else:
            features[contract.TARGET_KEY] = _float_feature(
                "target", self.horizon * self.num_features)
        body: list[_Piece] = []
        body_length = 0
        for name in sorted(features, key=_map_order):
            pieces, length = _entry(name, *features[name])
            body += pieces
            body_length += length
        return [_Piece(_field(_TAG1, body_length)), *body]

    @functools.lru_cache(maxsize=4096)  # noqa: B019  (schemas are few and immutable)
    def example_bytes(self, series_bytes: int, start_bytes: int, label_bytes: int = 0,
                      label_id: int = 0) -> int:
        """Serialized size of one example with these UTF-8 byte lengths."""
        varint = len(_varint(label_id))
        widths = {"window": 4 * self.window_size * self.num_features,
                  "target": 4 * self.horizon * self.num_features,
                  "key": series_bytes + 1 + start_bytes, "series_id": series_bytes,
                  "window_start": start_bytes, "label_name": label_bytes, "label": varint}
        return sum(len(p.constant) if p.column is None else widths[p.column]
                   for p in self._layout(series_bytes, start_bytes, label_bytes, varint))

    def encode(self, series_ids: Sequence[str], starts: Sequence[str], windows: np.ndarray,
               targets: np.ndarray | None = None, labels: Sequence[str] | None = None,
               label_ids: Sequence[int] | None = None) -> list[bytes]:
        """Serialized examples, in order, of windows ``[n, W, F]`` with their series
        ids and start texts, and targets ``[n, H, F]`` or labels and label ids."""
        n = len(starts)
        if not n:
            return []
        text: dict[str, bytes] = {}

        def encoded(values: Sequence[str]) -> list[bytes]:
            return [text.get(v) or text.setdefault(v, v.encode()) for v in values]

        columns_of = {"series_id": encoded(series_ids), "window_start": encoded(starts),
                      "label_name": encoded(labels) if labels is not None else [b""] * n,
                      "label": ([_varint(int(i)) for i in label_ids]
                                if label_ids is not None else [b""] * n)}
        floats = {"window": np.ascontiguousarray(windows, dtype="<f4").reshape(n, -1)
                  .view(np.uint8)}
        if targets is not None:
            floats["target"] = np.ascontiguousarray(targets, dtype="<f4").reshape(
                n, -1).view(np.uint8)
        lengths = np.array([[len(v) for v in columns_of[name]] for name in
                            ("series_id", "window_start", "label_name", "label")],
                           np.int64).T.reshape(n, 4)
        out: list[bytes | None] = [None] * n
        # Rows whose strings have the same lengths share one layout: one matrix each.
        groups, inverse = np.unique(lengths, axis=0, return_inverse=True)
        for g, (series_len, start_len, label_len, varint_len) in enumerate(groups.tolist()):
            rows = np.flatnonzero(inverse.reshape(-1) == g)
            picked = rows.tolist()

            def matrix(name: str, width: int, picked: list[int] = picked) -> np.ndarray:
                values = columns_of[name]
                return np.frombuffer(b"".join(values[i] for i in picked), np.uint8).reshape(
                    len(picked), width)

            columns = {name: matrix(name, width) for name, width in (
                ("series_id", series_len), ("window_start", start_len),
                ("label_name", label_len), ("label", varint_len))}
            columns["key"] = np.concatenate([
                columns["series_id"], np.full((len(rows), 1), ord("@"), np.uint8),
                columns["window_start"]], axis=1)
            columns.update({name: array[rows] for name, array in floats.items()})
            layout = self._layout(series_len, start_len, label_len, varint_len)
            widths = [len(p.constant) if p.column is None else columns[p.column].shape[1]
                      for p in layout]
            result = np.empty((len(rows), sum(widths)), np.uint8)
            at = 0
            for piece, width in zip(layout, widths, strict=True):
                if piece.column is None:
                    result[:, at:at + width] = np.frombuffer(piece.constant, np.uint8)
                else:
                    result[:, at:at + width] = columns[piece.column]
                at += width
            for i, row in zip(picked, result, strict=True):
                out[i] = row.tobytes()
        return out  # type: ignore[return-value]
