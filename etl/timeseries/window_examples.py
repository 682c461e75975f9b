"""Serialized ``tf.train.Example``s of time-series windows, a block at a time.

Byte for byte what ``etl.core.transform.examples.serialize_example`` writes for the same instance
(tested so). A block of windows becomes one Arrow record batch, built from the numpy
arrays without a Python object per value, which tfx_bsl's C++ encoder
(``RecordBatchToExamplesEncoder``, as in tf.Transform) turns into examples; each is
then re-serialized with protobuf's ``deterministic=True``, because the encoder
writes an example's features in no fixed order.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence

import numpy as np
import pyarrow as pa

from etl.core.transform.examples import serialize_example
from reader.format import contract


def _list_of_binary(values: Sequence[str]) -> pa.Array:
    """One single-value ``list<binary>`` per string (UTF-8), as the encoder expects."""
    return pa.ListArray.from_arrays(pa.array(np.arange(len(values) + 1, dtype=np.int32)),
                                    pa.array([v.encode() for v in values], pa.binary()))


def _list_of_rows(matrix: np.ndarray) -> pa.Array:
    """One ``list<value>`` per row of ``matrix`` ``[n, ...]`` (flattened)."""
    n = matrix.shape[0]
    flat = np.ascontiguousarray(matrix).reshape(-1)
    offsets = np.arange(n + 1, dtype=np.int64) * (flat.size // n)
    return pa.LargeListArray.from_arrays(pa.array(offsets), pa.array(flat))


def _reserialize(serialized: Sequence[bytes]) -> list[bytes]:
    import tensorflow as tf

    example = tf.train.Example()
    out = []
    for one in serialized:
        example.ParseFromString(one)
        out.append(example.SerializeToString(deterministic=True))
    return out


@dataclasses.dataclass(frozen=True)
class WindowSchema:
    """The stored window example (docs/FORMAT.md): ``window`` ``[W, F]``, then
    ``target`` ``[H, target_features or F]`` or ``label`` + ``label_name``,
    ``series_id``, ``window_start`` and ``key`` (``<series_id>@<window_start>``);
    with column roles also the float32 ``blocks``, each ``(name, values per example)``
    (``known``, ``static_real``, ``target_scale``), and the int64 ``id_blocks``
    (``known_cat``, ``static_cat``)."""

    window_size: int
    horizon: int
    num_features: int
    classification: bool
    target_features: int | None = None
    blocks: tuple[tuple[str, int], ...] = ()
    id_blocks: tuple[tuple[str, int], ...] = ()

    @functools.lru_cache(maxsize=4096)  # noqa: B019  (schemas are few and immutable)
    def example_bytes(self, series_bytes: int, start_bytes: int, label_bytes: int = 0,
                      label_id: int = 0) -> int:
        """Serialized size of one example whose strings have these UTF-8 byte lengths
        (the size depends on nothing else but the label id's varint length)."""
        instance: dict[str, object] = {
            contract.SOURCE_KEY: b"s" * (series_bytes + 1 + start_bytes),
            contract.SERIES_ID_KEY: b"s" * series_bytes,
            contract.WINDOW_START_KEY: b"t" * start_bytes,
            contract.WINDOW_KEY: np.zeros(self.window_size * self.num_features, np.float32),
        }
        if self.classification:
            instance[contract.LABEL_KEY] = np.int64(label_id)
            instance[contract.LABEL_NAME_KEY] = b"l" * label_bytes
        else:
            instance[contract.TARGET_KEY] = np.zeros(
                self.horizon * (self.target_features or self.num_features), np.float32)
        for name, size in self.blocks:
            instance[name] = np.zeros(size, np.float32)
        for name, size in self.id_blocks:  # Each id counted as 1 byte (ids < 128).
            instance[name] = np.zeros(size, np.int64)
        return len(serialize_example(instance))

    def encode(self, series_ids: Sequence[str], starts: Sequence[str], windows: np.ndarray,
               targets: np.ndarray | None = None, labels: Sequence[str] | None = None,
               label_ids: Sequence[int] | None = None,
               blocks: dict[str, np.ndarray] | None = None) -> list[bytes]:
        """Serialized examples, in order, of windows ``[n, W, F]`` with their series
        ids and start texts, and targets ``[n, H, F]`` or labels and label ids (and
        the schema's ``blocks``, ``[n, ...]`` each, by name)."""
        from tfx_bsl.coders.example_coder import RecordBatchToExamplesEncoder

        if not len(starts):
            return []
        columns = {
            contract.SOURCE_KEY: _list_of_binary(
                [f"{s}@{t}" for s, t in zip(series_ids, starts, strict=True)]),
            contract.SERIES_ID_KEY: _list_of_binary(series_ids),
            contract.WINDOW_START_KEY: _list_of_binary(starts),
            contract.WINDOW_KEY: _list_of_rows(np.asarray(windows, np.float32)),
        }
        if self.classification:
            assert labels is not None and label_ids is not None
            columns[contract.LABEL_KEY] = _list_of_rows(
                np.asarray(label_ids, np.int64).reshape(-1, 1))
            columns[contract.LABEL_NAME_KEY] = _list_of_binary(labels)
        else:
            assert targets is not None
            columns[contract.TARGET_KEY] = _list_of_rows(np.asarray(targets, np.float32))
        for name, _ in self.blocks:
            columns[name] = _list_of_rows(np.asarray(blocks[name], np.float32))
        for name, _ in self.id_blocks:
            columns[name] = _list_of_rows(np.asarray(blocks[name], np.int64))
        batch = pa.RecordBatch.from_arrays(list(columns.values()), list(columns))
        return _reserialize(RecordBatchToExamplesEncoder().encode(batch))
