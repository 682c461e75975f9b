"""Unit tests of etl/images/shards.py: loading, batch isolation, in-order shard outcomes."""

from __future__ import annotations

import concurrent.futures
import io
import threading
import time

import numpy as np
import pytest
import tensorflow as tf
from PIL import Image

from etl.core import dead_letters
from etl.core.dead_letters import Rejection
from etl.images import codec
from etl.images import loading as image_loading
from etl.images.batches import Loaded, load_record
from etl.images.shards import default_gzip_level, process_shard, transform_batch
from etl.images.sources import ImageRecord
from tests.image_fixtures import _encode

LIMITS = image_loading.InputLimits()


@tf.function
def _preprocess_batch(images: tf.Tensor) -> tf.Tensor:
    # The graph form the exported transform_fn runs: one failing image fails the call.
    return tf.map_fn(lambda b: codec.preprocess(b, 4, codec.PNG, 95), images,
                     fn_output_signature=tf.TensorSpec([], tf.string))


class CountingTransform:
    """A stand-in transform_fn: the job's image ops, plus the key; counts its calls."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, batch):
        self.calls += 1
        images = _preprocess_batch(tf.constant([item.data for item in batch]))
        return ({"image": images.numpy(),
                 "key": np.array([item.record.key.encode() for item in batch], dtype=object)},
                [None] * len(batch))


def _record(key: str, uri: str = "") -> ImageRecord:
    return ImageRecord(key=key, uri=uri or f"/in/{key}", label="cat", split="train")


def _good(i: int) -> bytes:
    return _encode("png", 5, 7, (i, 2 * i, 3 * i))


def _truncated_jpeg() -> bytes:
    rng = np.random.default_rng(0)
    data = tf.io.encode_jpeg(rng.integers(0, 255, (40, 40, 3), dtype=np.uint8)).numpy()
    return data[: len(data) // 2]


def _truncated_png() -> bytes:
    rng = np.random.default_rng(1)
    data = tf.io.encode_png(rng.integers(0, 255, (40, 40, 3), dtype=np.uint8)).numpy()
    return data[: len(data) // 2]


def test_load_record_reads_and_checks(tmp_path):
    (tmp_path / "good.png").write_bytes(_good(1))
    (tmp_path / "empty.png").write_bytes(b"")
    (tmp_path / "cut.jpg").write_bytes(_truncated_jpeg())
    loaded = load_record(_record("good", str(tmp_path / "good.png")), LIMITS)
    # The header as Pillow reads it: an independent check of what the step keeps.
    with Image.open(io.BytesIO(_good(1))) as image:
        header = image_loading.ImageHeader(image.width * image.height, image.mode,
                                           image.size)
    # Weighed as TensorFlow decodes it: 3 + 10 bytes a pixel, and its file.
    assert loaded == Loaded(_record("good", str(tmp_path / "good.png")), _good(1),
                            header=header, weight=len(_good(1)) + 7 * 5 * 13)
    empty = load_record(_record("empty", str(tmp_path / "empty.png")), LIMITS)
    assert (empty.key, empty.reason) == ("empty", dead_letters.EMPTY_FILE)
    missing = load_record(_record("gone", str(tmp_path / "gone.png")), LIMITS)
    assert missing.reason == dead_letters.UNREADABLE_FILE
    assert missing.message.startswith("Cannot read file:")
    # A truncated JPEG has an intact header: the strict check's reduced-scale decode
    # finds it ends early (the code TensorFlow's decode would give it); without the
    # check, the transform decides.
    cut = load_record(_record("cut", str(tmp_path / "cut.jpg")), LIMITS)
    assert cut.reason == dead_letters.UNDECODABLE_IMAGE
    assert cut.message == ("JPEG data ends before the image does (truncated): libjpeg: "
                           "Premature end of JPEG file")
    lenient = image_loading.InputLimits(strict_decoding=False)
    assert isinstance(load_record(_record("cut", str(tmp_path / "cut.jpg")), lenient), Loaded)


def test_transform_batch_isolates_undecodable_images():
    transform = CountingTransform()
    batch = [Loaded(_record("a"), _good(1)), Loaded(_record("cut.jpg"), _truncated_jpeg()),
             Loaded(_record("b"), _good(2)), Loaded(_record("cut.png"), _truncated_png()),
             Loaded(_record("bmp"), b"BMW is a car, not a bitmap")]
    outcomes = transform_batch(transform, batch)
    assert [o.key if isinstance(o, Rejection) else o[0].key for o in outcomes] == [
        "a", "cut.jpg", "b", "cut.png", "bmp"]
    rejected = {o.key: o for o in outcomes if isinstance(o, Rejection)}
    assert {k: r.reason for k, r in rejected.items()} == {
        k: dead_letters.UNDECODABLE_IMAGE for k in ("cut.jpg", "cut.png", "bmp")}
    assert rejected["cut.jpg"].message.startswith("TensorFlow cannot decode this JPEG file: ")
    assert rejected["cut.png"].message.startswith("TensorFlow cannot decode this PNG file: ")
    assert rejected["bmp"].message.startswith("TensorFlow cannot decode this BMP file: ")
    for rejection in rejected.values():
        # No run-specific node or op names leak into the dead letter, nor where the
        # failing node was defined (this machine's files).
        assert "{{" not in rejection.message and "[Op:" not in rejection.message
        assert "File \"" not in rejection.message and "Detected at" not in rejection.message
    # The good images come out exactly as from a clean batch: one failing call, then
    # one call per image.
    clean = transform_batch(CountingTransform(), [batch[0], batch[2]])
    assert [o[1] for o in outcomes if not isinstance(o, Rejection)] == [o[1] for o in clean]
    assert transform.calls == 1 + len(batch)


def _shard_inputs(tmp_path) -> list[ImageRecord]:
    records = []
    for i in range(23):
        path = tmp_path / f"{i:02d}.png"
        if i % 5 == 3:
            path.write_bytes(_truncated_png())      # fails in the transform
        elif i % 7 == 6:
            path.write_bytes(b"not an image")       # fails the header check
        elif i != 19:                               # 19: missing file
            path.write_bytes(_good(i))
        records.append(_record(f"cat/{i:02d}.png", str(path)))
    return records


def _outcome_key(outcome) -> tuple[str, str]:
    if isinstance(outcome, Rejection):
        return outcome.key, outcome.reason
    return outcome[0].key, outcome[1].hex()


@pytest.mark.parametrize("read_threads,transform_threads,batch_rows", [
    (1, 1, 1), (4, 3, 3), (2, 2, 50)])
def test_process_shard_outcomes_keep_input_order_whatever_the_concurrency(
        tmp_path, read_threads, transform_threads, batch_rows):
    records = _shard_inputs(tmp_path)
    with concurrent.futures.ThreadPoolExecutor(read_threads) as read_pool, \
            concurrent.futures.ThreadPoolExecutor(transform_threads) as transform_pool:
        outcomes = list(process_shard(records, CountingTransform(), LIMITS, read_pool,
                                      transform_pool, transform_threads=transform_threads,
                                      batch_rows=batch_rows))
    assert [_outcome_key(o)[0] for o in outcomes] == [r.key for r in records]
    reasons = {k: v for k, v in map(_outcome_key, outcomes) if v in dead_letters.REASONS}
    assert reasons == {
        **{f"cat/{i:02d}.png": dead_letters.UNDECODABLE_IMAGE for i in (3, 8, 13, 18)},
        **{f"cat/{i:02d}.png": dead_letters.UNSUPPORTED_FORMAT for i in (6, 20)},
        "cat/19.png": dead_letters.UNREADABLE_FILE,
    }
    # Independent of the concurrency: compare with the sequential reference.
    with concurrent.futures.ThreadPoolExecutor(1) as one, \
            concurrent.futures.ThreadPoolExecutor(1) as other:
        reference = list(process_shard(records, CountingTransform(), LIMITS, one, other,
                                       transform_threads=1, batch_rows=1))
    assert list(map(_outcome_key, outcomes)) == list(map(_outcome_key, reference))


def test_default_gzip_level_refuses_an_unknown_format():
    with pytest.raises(ValueError, match="Unknown image format 'webp'"):
        default_gzip_level("webp", 224)


def test_a_target_normalised_beyond_float32_is_a_dead_letter():
    from etl.images.shards import _outcome

    record = ImageRecord("a.png", "/a.png", None, "test", targets=(1e10,))
    rejected = _outcome(record, {"key": b"a.png",
                                 "target": np.array([np.inf], np.float32)}, None)
    assert isinstance(rejected, Rejection) and rejected.reason == "non_finite_target"
    kept = _outcome(record, {"key": b"a.png", "target": np.array([2.5], np.float32)}, None)
    assert kept == (record, tf.train.Example(features=tf.train.Features(feature={
        "key": tf.train.Feature(bytes_list=tf.train.BytesList(value=[b"a.png"])),
        "target": tf.train.Feature(float_list=tf.train.FloatList(value=[2.5])),
    })).SerializeToString(deterministic=True), None)


# --- the decode budget -----------------------------------------------------------------

class RecordingTransform:
    """A stand-in transform_fn that decodes nothing: it records each batch's keys and
    the most weight (``Loaded.weight``) its calls held at once."""

    def __init__(self) -> None:
        self.batches: list[list[str]] = []
        self.held = self.most_held = 0
        self._lock = threading.Lock()

    def __call__(self, batch):
        weight = sum(item.weight for item in batch)
        with self._lock:
            self.batches.append([item.record.key for item in batch])
            self.held += weight
            self.most_held = max(self.most_held, self.held)
        time.sleep(0.02)  # long enough for the other thread's batch to overlap
        with self._lock:
            self.held -= weight
        keys = [item.record.key.encode() for item in batch]
        return ({"image": np.array(keys, dtype=object), "key": np.array(keys, dtype=object)},
                [None] * len(batch))


def _flat_png(tmp_path, name: str, mode: str, side: int) -> ImageRecord:
    path = tmp_path / f"{name}.png"
    Image.new(mode, (side, side), (40,) * len(mode)).save(path)
    return _record(name, str(path))


def test_process_shard_batches_by_decoded_weight_within_the_budget(tmp_path):
    # 1000 x 1000 RGBA: 14 MB to decode from a file of a few KB; 100 x 100 RGB: 130 KB.
    # A 20 MiB budget: batches of at most 6.7 MiB, so each large image alone, and
    # never two of them at once.
    names = ["s0", "s1", "B0", "s2", "B1", "B2", "s3", "s4", "s5", "s6", "s7"]
    records = [_flat_png(tmp_path, n, "RGBA", 1000) if n.startswith("B")
               else _flat_png(tmp_path, n, "RGB", 100) for n in names]
    limits = image_loading.InputLimits(decode_budget_bytes=20 * 2**20)
    transform = RecordingTransform()
    with concurrent.futures.ThreadPoolExecutor(2) as read_pool, \
            concurrent.futures.ThreadPoolExecutor(2) as transform_pool:
        outcomes = list(process_shard(records, transform, limits, read_pool,
                                      transform_pool, transform_threads=2, batch_rows=4))
    assert [o[0].key for o in outcomes] == names
    assert sorted(transform.batches) == sorted([
        ["s0", "s1"], ["B0"], ["s2"], ["B1"], ["B2"], ["s3", "s4", "s5", "s6"], ["s7"]])
    assert 14 * 10**6 < transform.most_held <= 20 * 2**20


def test_process_shard_refuses_an_image_heavier_than_the_budget_in_its_place(tmp_path):
    records = [_flat_png(tmp_path, "a", "RGB", 100), _flat_png(tmp_path, "B", "RGBA", 1000),
               _flat_png(tmp_path, "b", "RGB", 100)]
    limits = image_loading.InputLimits(decode_budget_bytes=10 * 2**20)
    transform = RecordingTransform()
    with concurrent.futures.ThreadPoolExecutor(2) as read_pool, \
            concurrent.futures.ThreadPoolExecutor(2) as transform_pool:
        outcomes = list(process_shard(records, transform, limits, read_pool,
                                      transform_pool, transform_threads=2))
    rejected = outcomes[1]
    assert (rejected.key, rejected.reason) == ("B", dead_letters.IMAGE_TOO_LARGE)
    assert rejected.message.startswith("Decoding it (1000 x 1000 RGBA) would hold about 13 "
                                       "MiB at once, above --decode_budget_mb (10)")
    assert [o[0].key for o in (outcomes[0], outcomes[2])] == ["a", "b"]
    assert transform.batches == [["a", "b"]]


def test_the_job_decodes_large_compressible_pngs_within_its_budget(tmp_path, monkeypatch):
    # Six 512 x 512 16-bit RGBA PNGs of one colour each (about 1 KB a file, 3.8 MiB
    # each to decode and resize to 16 px) under a 10 MiB budget: each decoded alone,
    # and each stored as the high bytes of its colour.
    from etl.images import shards
    from tests.job_runs import all_records, run_images_job

    colours = {f"{label}/{i}.png": (30 * i + 7, 200 - 20 * i, 11 * i)
               for i, label in enumerate("aabbcc")}
    weights = {}
    for key, colour in colours.items():
        pixels = np.full((512, 512, 4), [*colour, 128], np.uint16) * 257
        data = tf.io.encode_png(pixels).numpy()
        (tmp_path / "in" / key).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "in" / key).write_bytes(data)
        weights[key] = image_loading.decode_weight(data, image_loading.read_header(data), 16)
        assert 10 * 2**20 / 3 < weights[key] < 10 * 2**20 / 2
    seen: dict[str, tuple[int, int]] = {}
    real = shards.transform_batch

    def recording(transform, batch, strict=True):
        seen[batch[0].record.key] = (len(batch), sum(item.weight for item in batch))
        return real(transform, batch, strict)

    monkeypatch.setattr(shards, "transform_batch", recording)
    out = str(tmp_path / "out")
    manifest = run_images_job(str(tmp_path / "in"), out, "--decode_budget_mb=10",
                              "--image_format=png", "--statistics=off")
    assert seen == {key: (1, weight) for key, weight in weights.items()}
    stored = {key: tf.io.decode_png(row["image"]).numpy()
              for key, (_, row) in all_records(out, manifest).items()}
    assert {key: pixels.shape for key, pixels in stored.items()} == {
        key: (16, 16, 3) for key in colours}
    for key, pixels in stored.items():
        assert (pixels == colours[key]).all(), key
