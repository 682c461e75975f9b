"""One-off: time-series window Examples by tfx_bsl's encoder (the job's) against one
TensorFlow graph of ``tf.io.encode_proto`` ops, on one and two threads.

tfx_bsl's ``RecordBatchToExamplesEncoder`` holds the GIL and orders each example's
features its own way, so the job re-serializes every example deterministically,
holding the GIL too; the graph runs without the GIL, in protobuf's deterministic
order, so two threads could encode blocks side by side. Both must give the same
bytes (checked here). Wall and CPU µs per window of 8,192-window blocks, best of 3.
Usage: ``python -m scripts.measure_window_encoders``.
"""

from __future__ import annotations

import concurrent.futures
import os
import time
from typing import Any

os.environ.setdefault("TF_NUM_INTRAOP_THREADS", "1")

import numpy as np
import tensorflow as tf

from etl.core.transform.examples import serialize_example
from etl.timeseries.window_examples import WindowSchema
from reader.format import contract

BLOCK = 8192


def feature_order(instance: dict[str, Any]) -> list[str]:
    """The features in the order serialize_example writes them (each map entry
    starts with its key field: tag, length, key)."""
    serialized = serialize_example(instance)
    return sorted(instance, key=lambda k: serialized.index(b"\n" + bytes([len(k)]) + k.encode()))


def graph_encoder(order: list[tuple[str, str]]) -> Any:
    def message(kind: str, fields: list[str], values: list[Any], sizes: Any) -> Any:
        return tf.io.encode_proto(sizes=sizes, values=values, field_names=fields,
                                  message_type=kind)

    def encode(*inputs: Any) -> Any:
        n = tf.shape(inputs[0])[0]
        ones = tf.ones([n, 1], tf.int32)
        entries = []
        for (name, kind), value in zip(order, inputs, strict=True):
            if kind == "bytes":
                values = message("tensorflow.BytesList", ["value"], [value[:, None]], ones)
            else:
                values = message("tensorflow.FloatList", ["value"], [value],
                                 tf.fill([n, 1], tf.shape(value)[1]))
            feature = message("tensorflow.Feature", [f"{kind}_list"], [values[:, None]], ones)
            entries.append(message("tensorflow.Features.FeatureEntry", ["key", "value"],
                                   [tf.fill([n, 1], name), feature[:, None]],
                                   tf.ones([n, 2], tf.int32)))
        features = message("tensorflow.Features", ["feature"], [tf.stack(entries, axis=1)],
                           tf.fill([n, 1], len(entries)))
        return message("tensorflow.Example", ["features"], [features[:, None]], ones)

    specs = [tf.TensorSpec([None], tf.string) if kind == "bytes"
             else tf.TensorSpec([None, None], tf.float32) for _, kind in order]
    return tf.function(encode, autograph=False).get_concrete_function(*specs)


def main() -> None:
    rng = np.random.default_rng(0)
    ids = [f"MT_{i % 370:03d}" for i in range(BLOCK)]
    starts = [f"2012-01-{1 + i % 28:02d} {i % 24:02d}:00:00" for i in range(BLOCK)]
    windows = rng.random((BLOCK, 168, 1), np.float32)
    targets = rng.random((BLOCK, 24, 1), np.float32)
    schema = WindowSchema(168, 24, 1, classification=False)
    kinds = {contract.SOURCE_KEY: "bytes", contract.SERIES_ID_KEY: "bytes",
             contract.WINDOW_START_KEY: "bytes", contract.WINDOW_KEY: "float",
             contract.TARGET_KEY: "float"}
    instance = {contract.SOURCE_KEY: b"s", contract.SERIES_ID_KEY: b"s",
                contract.WINDOW_START_KEY: b"t", contract.WINDOW_KEY: np.zeros(1, np.float32),
                contract.TARGET_KEY: np.zeros(1, np.float32)}
    order = [(name, kinds[name]) for name in feature_order(instance)]
    graph = graph_encoder(order)

    def by_graph() -> list[bytes]:
        values = {contract.SOURCE_KEY: [f"{s}@{t}" for s, t in zip(ids, starts, strict=True)],
                  contract.SERIES_ID_KEY: ids, contract.WINDOW_START_KEY: starts,
                  contract.WINDOW_KEY: windows.reshape(BLOCK, -1),
                  contract.TARGET_KEY: targets.reshape(BLOCK, -1)}
        return graph(*(tf.constant(values[name]) for name, _ in order)).numpy().tolist()

    def by_tfx_bsl() -> list[bytes]:
        return schema.encode(ids, starts, windows, targets)

    assert by_graph() == by_tfx_bsl(), "the two encoders differ"
    print(f"blocks of {BLOCK} windows (168 + 24 floats), µs per window, best of 3")
    for name, encode in (("tfx_bsl + re-serialization", by_tfx_bsl),
                         ("encode_proto graph", by_graph)):
        for threads in (1, 2):
            best_wall = best_cpu = float("inf")
            with concurrent.futures.ThreadPoolExecutor(threads) as pool:
                for _ in range(3):
                    wall, cpu = time.perf_counter(), time.process_time()
                    list(pool.map(lambda _, encode=encode: encode(), range(8)))
                    best_wall = min(best_wall, time.perf_counter() - wall)
                    best_cpu = min(best_cpu, time.process_time() - cpu)
            print(f"  {name:<28} {threads} thread(s): wall {1e6 * best_wall / (8 * BLOCK):5.2f}"
                  f"  CPU {1e6 * best_cpu / (8 * BLOCK):5.2f}")


if __name__ == "__main__":
    main()
