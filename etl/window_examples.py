"""Serialized ``tf.train.Example``s of time-series windows, built as byte arrays.

Byte for byte what ``etl.examples.serialize_example`` (protobuf with
``deterministic=True``) writes for the same instance, tested so: the proto's wire
format with the feature map in that serializer's order. The windows of one run share every
length but that of ``window_start`` (and so of ``key``), so the examples of one
text length are rows of one ``uint8`` matrix assembled by column slices, with no
per-example Python work; a protobuf round trip per window cost more than the rest
of the job's per-window work together.
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


def _int_feature(value: int) -> tuple[list[_Piece], int]:
    packed = _varint(value)
    int_list_length = len(_field(_TAG1, len(packed))) + len(packed)
    body = _field(_TAG3, int_list_length) + _field(_TAG1, len(packed)) + packed
    return [_Piece(body)], len(body)


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
                label_id: int) -> list[_Piece]:
        features: dict[str, tuple[list[_Piece], int]] = {
            contract.SOURCE_KEY: _bytes_feature("key", series_bytes + 1 + start_bytes),
            contract.SERIES_ID_KEY: _bytes_feature("series_id", series_bytes),
            contract.WINDOW_KEY: _float_feature(
                "window", self.window_size * self.num_features),
            contract.WINDOW_START_KEY: _bytes_feature("window_start", start_bytes),
        }
        if self.classification:
            features[contract.LABEL_KEY] = _int_feature(label_id)
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
        fixed = {"window": 4 * self.window_size * self.num_features,
                 "target": 4 * self.horizon * self.num_features,
                 "key": series_bytes + 1 + start_bytes, "series_id": series_bytes,
                 "window_start": start_bytes, "label_name": label_bytes}
        return sum(len(p.constant) if p.column is None else fixed[p.column]
                   for p in self._layout(series_bytes, start_bytes, label_bytes, label_id))

    def encode(self, series_id: str, starts: Sequence[str], windows: np.ndarray,
               targets: np.ndarray | None = None, label: str | None = None,
               label_id: int = 0) -> list[bytes]:
        """Serialized examples of windows ``[n, W, F]`` (and targets ``[n, H, F]``, or
        the series' ``label`` and its id) starting at ``starts``, in that order."""
        series = series_id.encode()
        label_bytes = (label or "").encode()
        encoded_starts = [s.encode() for s in starts]
        n = len(encoded_starts)
        window_bytes = np.ascontiguousarray(windows, dtype="<f4").reshape(n, -1).view(
            np.uint8)
        target_bytes = None if targets is None else np.ascontiguousarray(
            targets, dtype="<f4").reshape(n, -1).view(np.uint8)
        lengths = np.fromiter((len(s) for s in encoded_starts), np.int64, n)
        out: list[bytes | None] = [None] * n
        for length in np.unique(lengths).tolist():
            rows = np.flatnonzero(lengths == length)
            texts = np.frombuffer(b"".join(encoded_starts[i] for i in rows.tolist()),
                                  np.uint8).reshape(len(rows), length)
            columns = {
                "window": window_bytes[rows], "window_start": texts,
                "key": np.concatenate([np.broadcast_to(np.frombuffer(
                    series + b"@", np.uint8), (len(rows), len(series) + 1)), texts], axis=1),
                "series_id": np.broadcast_to(np.frombuffer(series, np.uint8),
                                             (len(rows), len(series))),
                "label_name": np.broadcast_to(np.frombuffer(label_bytes, np.uint8),
                                              (len(rows), len(label_bytes))),
            }
            if target_bytes is not None:
                columns["target"] = target_bytes[rows]
            layout = self._layout(len(series), length, len(label_bytes), label_id)
            widths = [len(p.constant) if p.column is None else columns[p.column].shape[1]
                      for p in layout]
            matrix = np.empty((len(rows), sum(widths)), np.uint8)
            at = 0
            for piece, width in zip(layout, widths, strict=True):
                if piece.column is None:
                    matrix[:, at:at + width] = np.frombuffer(piece.constant, np.uint8)
                else:
                    matrix[:, at:at + width] = columns[piece.column]
                at += width
            for i, row in zip(rows.tolist(), matrix, strict=True):
                out[i] = row.tobytes()
        return out  # type: ignore[return-value]
