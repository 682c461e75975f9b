"""Property-based fuzzing of input validation: no crash, every input an example or a
dead letter. An image the header checks accept goes through the transform step, which
either stores it or isolates it as an ``undecodable_image`` dead letter, without
harming the good image batched with it."""

from __future__ import annotations

import csv
import json
import math

import numpy as np
import pytest
import tensorflow as tf
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from etl.core import dead_letters
from etl.core.dead_letters import Rejection
from etl.core.io.text_rows import parse_csv_line, parse_jsonl_line
from etl.images import codec
from etl.images.loading import InputLimits
from etl.images.shards import Loaded, transform_batch
from etl.images.sources import ImageRecord, record_from_row
from etl.timeseries.rows.sources import Columns, Row, parse_row
from etl.timeseries.series import Cleaning
from tests.image_fixtures import _encode, exif_block, textured_jpeg
from tests.image_loading import validate_image_bytes
from tests.series_fixtures import clean_series

FUZZ = settings(max_examples=1500, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
SEEDS = [_encode(kind, 12, 9, (200, 30, 90)) for kind in
         ("jpeg", "jpeg_progressive", "png", "png16", "palette", "gif", "bmp", "webp",
          "webp_alpha")]
SEEDS += [textured_jpeg(12, 9, exif=exif_block(6)), textured_jpeg(40, 30)]

# A mutation: (operation, relative position, byte value, length).
mutation = st.tuples(st.sampled_from(["flip", "set", "truncate", "insert", "delete"]),
                     st.floats(0, 1), st.integers(0, 255), st.integers(1, 16))


def mutate(data: bytes, mutations: list[tuple[str, float, int, int]]) -> bytes:
    buf = bytearray(data)
    for op, where, value, length in mutations:
        if not buf:
            break
        i = min(int(where * len(buf)), len(buf) - 1)
        if op == "flip":
            buf[i] ^= 1 << (value % 8)
        elif op == "set":
            buf[i] = value
        elif op == "truncate":
            del buf[i:]
        elif op == "insert":
            buf[i:i] = bytes([value]) * length
        else:
            del buf[i:i + length]
    return bytes(buf)


@tf.function
def _preprocess_batch(images: tf.Tensor) -> tf.Tensor:
    # The graph form the exported transform_fn runs: one failing image fails the call.
    # EXIF orientation and alpha compositing on, so mutated EXIF and alpha go through.
    return tf.map_fn(lambda b: codec.preprocess(b, 8, codec.PNG, 95,
                                                      alpha_background=(0, 128, 255)),
                     images, fn_output_signature=tf.TensorSpec([], tf.string))


def _transform(batch):
    images = _preprocess_batch(tf.constant([item.data for item in batch]))
    return ({"image": images.numpy(),
             "key": np.array([item.record.key.encode() for item in batch], dtype=object)},
            [None] * len(batch))


def _loaded(key: str, data: bytes) -> Loaded:
    return Loaded(ImageRecord(key=key, uri=f"/in/{key}", label="c"), data)


@FUZZ
@given(seed=st.sampled_from(range(len(SEEDS))), mutations=st.lists(mutation, max_size=4),
       strict=st.booleans())
def test_fuzz_mutated_images_are_validated_consistently(seed, mutations, strict):
    data = mutate(SEEDS[seed], mutations)
    problem = validate_image_bytes(data, InputLimits(max_image_pixels=10_000,
                                                     strict_decoding=strict))
    if problem is not None:
        reason, message = problem
        assert reason in dead_letters.REASONS and message
        return
    # Accepted by the header checks: batched with a good image, the mutated one is
    # stored (a decodable 8x8 image) or rejected alone; the good one is always stored.
    good, mutated = transform_batch(_transform, [_loaded("good", SEEDS[seed]),
                                                 _loaded("mutated", data)])
    assert not isinstance(good, Rejection)
    assert tf.io.parse_example(good[1], {"image": tf.io.FixedLenFeature([], tf.string)})
    if isinstance(mutated, Rejection):
        assert mutated.reason == dead_letters.UNDECODABLE_IMAGE and mutated.key == "mutated"
    else:
        image = tf.io.parse_single_example(
            mutated[1], {"image": tf.io.FixedLenFeature([], tf.string)})["image"]
        assert tf.io.decode_png(image).shape == (8, 8, 3)


@FUZZ
@given(data=st.binary(max_size=256))
def test_fuzz_random_bytes_never_crash_validation(data):
    problem = validate_image_bytes(data)
    assert problem is None or problem[0] in dead_letters.REASONS


def _outcome_is_record_or_rejection(result: object) -> None:
    assert isinstance(result, (ImageRecord, Rejection))
    if isinstance(result, Rejection):
        assert result.reason in dead_letters.REASONS


@FUZZ
@given(line=st.text(max_size=80))
def test_fuzz_csv_manifest_lines(line):
    row = parse_csv_line(line, ("path", "label", "split"))
    if row is None:
        # Not three fields (the caller makes it a malformed_manifest_row dead letter).
        try:
            fields = next(csv.reader([line]), [])
        except csv.Error:
            fields = None
        assert fields is None or len(fields) != 3
        return
    _outcome_is_record_or_rejection(record_from_row(row, "/data", "m.csv:2"))


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True)
    | st.text(max_size=20),
    lambda children: st.lists(children, max_size=3)
    | st.dictionaries(st.text(max_size=5), children, max_size=3),
    max_leaves=8)


@FUZZ
@given(obj=st.dictionaries(st.sampled_from(["path", "label", "split", "other"]),
                           json_values, max_size=4))
def test_fuzz_jsonl_manifest_objects(obj):
    row = parse_jsonl_line(json.dumps(obj))
    assert isinstance(row, dict) and sorted(row) == sorted(obj)
    _outcome_is_record_or_rejection(record_from_row(row, "gs://bucket/data", "m.jsonl:1"))


COLUMNS = Columns("series_id", "timestamp", ("a", "b"))


@FUZZ
@given(row=st.dictionaries(st.sampled_from(["series_id", "timestamp", "a", "b"]),
                           json_values, max_size=4))
def test_fuzz_timeseries_rows(row):
    result = parse_row(row, COLUMNS, "rows.jsonl:1")
    assert isinstance(result, (Row, Rejection))
    if isinstance(result, Row):
        assert all(math.isnan(v) or abs(np.float32(v)) < math.inf for v in result.values)
        assert math.isfinite(result.time)
    else:
        assert result.reason in dead_letters.REASONS


@pytest.mark.parametrize("policy", [Cleaning(missing=m, duplicates=d)
                                    for m in ("drop", "ffill", "interpolate", "reject")
                                    for d in ("mean", "reject")])
@settings(max_examples=300, deadline=None)
@given(points=st.lists(st.tuples(st.integers(0, 30),
                                 st.one_of(st.none(), st.floats(-1e6, 1e6))),
                       max_size=40))
def test_fuzz_clean_series_accounts_for_every_row(policy, points):
    rows = [Row("s", float(t), str(t), "numeric", (math.nan if v is None else v,),
                f"in:{i}") for i, (t, v) in enumerate(points)]
    result = clean_series("s", rows, policy)
    stats = result.stats
    assert stats["rows_read"] == len(rows)
    assert stats["rows_read"] == (stats["rows_kept"] + stats["rows_rejected"]
                                  + stats["rows_dropped_missing"]
                                  + stats["rows_merged_duplicates"])
    kept = sum(len(s) for s in result.segments)
    assert kept == stats["rows_kept"]
    for segment in result.segments:
        assert not any(math.isnan(v) for v in segment.values.ravel())
