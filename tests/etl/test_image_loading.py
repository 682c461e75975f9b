"""Unit tests of etl/image_loading.py: byte validation, TF error text and LoadImages."""

from __future__ import annotations

import apache_beam as beam
import numpy as np
import pytest
import tensorflow as tf
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to

from etl import image_loading, splits
from etl.image_sources import ImageRecord
from tests.image_fixtures import _encode

# Never the plain DirectRunner: it first tries to download Prism, which stalls offline.
RUNNER = "apache_beam.runners.portability.fn_api_runner.FnApiRunner"


def _truncated_jpeg() -> bytes:
    data = _encode("jpeg", 40, 40, (10, 20, 30))
    return data[: len(data) // 2]


# --- validate_image_bytes -------------------------------------------------------------

def test_validate_image_bytes_empty():
    assert image_loading.validate_image_bytes(b"") == (
        "empty_file", "File is empty (0 bytes).")


@pytest.mark.parametrize("data", [
    b"this is not an image",
    b"root:x:0:0:root:/root:/bin/bash\n",
    bytes(range(256)),
])
def test_validate_image_bytes_unsupported_format_message_quotes_no_content(data):
    # The same fixed text whatever the bytes: a dead letter never carries the file.
    assert image_loading.validate_image_bytes(data) == (
        "unsupported_format",
        "No known image signature: not a JPEG, PNG, GIF, BMP or WebP file.")


def test_validate_image_bytes_truncated_jpeg_is_undecodable():
    reason, message = image_loading.validate_image_bytes(_truncated_jpeg())
    assert reason == "undecodable_image"
    assert message.startswith("TensorFlow cannot decode this JPEG file: ")
    # No run-specific node or op names leak into the dead letter.
    assert "{{" not in message and "[Op:" not in message


def test_validate_image_bytes_bmp_magic_without_image_is_undecodable():
    reason, message = image_loading.validate_image_bytes(b"BMW is a car, not a bitmap")
    assert reason == "undecodable_image"
    assert message.startswith("TensorFlow cannot decode this BMP file: ")


@pytest.mark.parametrize("kind", ["png", "jpeg", "gif", "bmp", "png16", "palette"])
def test_validate_image_bytes_good_image_is_none(kind):
    assert image_loading.validate_image_bytes(_encode(kind, 9, 11, (1, 2, 3))) is None


# --- tf_error_detail ------------------------------------------------------------------

def test_tf_error_detail_strips_function_node():
    message = ("{{function_node __wrapped__DecodeImage_device_/job:localhost/replica:0/"
               "task:0/device:CPU:0}} jpeg::Uncompress failed. Invalid JPEG data.")
    assert image_loading.tf_error_detail(message) == (
        "jpeg::Uncompress failed. Invalid JPEG data.")


def test_tf_error_detail_strips_node_brackets():
    message = "Invalid PNG data. [[{{node DecodePng_17}}]] more"
    assert image_loading.tf_error_detail(message) == "Invalid PNG data. more"


def test_tf_error_detail_strips_op_suffix():
    message = "Invalid PNG. Failed to initialize decoder. [Op:DecodeImage] name: foo_3"
    assert image_loading.tf_error_detail(message) == (
        "Invalid PNG. Failed to initialize decoder.")


def test_tf_error_detail_strips_all_parts_and_collapses_whitespace():
    message = ("{{function_node f_1}}  Bad\n data.\t[[{{node n_2}}]]  tail "
               "[Op:DecodeImage] name: x")
    assert image_loading.tf_error_detail(message) == "Bad data. tail"


def test_tf_error_detail_truncates_to_300_characters():
    assert image_loading.tf_error_detail("x" * 1000) == "x" * 300


# --- LoadImages -----------------------------------------------------------------------

def test_load_images_routes_good_and_bad_files(tmp_path):
    good_bytes = _encode("png", 6, 6, (9, 8, 7))
    (tmp_path / "good.png").write_bytes(good_bytes)
    (tmp_path / "empty.jpg").write_bytes(b"")
    records = [
        ImageRecord(key="cat/good.png", uri=str(tmp_path / "good.png"), label="cat",
                    split="test"),
        ImageRecord(key="cat/missing.png", uri=str(tmp_path / "missing.png"), label="cat"),
        ImageRecord(key="dog/empty.jpg", uri=str(tmp_path / "empty.jpg"), label="dog"),
    ]
    with TestPipeline(runner=RUNNER) as p:
        outputs = (p | beam.Create(records)
                   | beam.ParDo(image_loading.LoadImages(splits.SplitFractions()))
                   .with_outputs(image_loading.REJECTED, main="loaded"))
        assert_that(outputs.loaded, equal_to([
            ("test", {"image": good_bytes, "label": "cat", "key": "cat/good.png"}),
        ]), label="CheckLoaded")
        assert_that(
            outputs[image_loading.REJECTED]
            | beam.Map(lambda r: (r.key, r.source, r.reason)),
            equal_to([
                ("cat/missing.png", str(tmp_path / "missing.png"), "unreadable_file"),
                ("dog/empty.jpg", str(tmp_path / "empty.jpg"), "empty_file"),
            ]), label="CheckRejected")


def test_load_images_assigns_split_from_key_hash_when_none_given(tmp_path):
    data = _encode("png", 4, 4, (1, 1, 1))
    fractions = splits.SplitFractions(0.5, 0.25, 0.25)
    keys = [f"cat/{i}.png" for i in range(8)]
    for i in range(8):
        (tmp_path / f"{i}.png").write_bytes(data)
    records = [ImageRecord(key=k, uri=str(tmp_path / f"{i}.png"), label="cat")
               for i, k in enumerate(keys)]
    with TestPipeline(runner=RUNNER) as p:
        loaded = (p | beam.Create(records)
                  | beam.ParDo(image_loading.LoadImages(fractions))
                  | beam.Map(lambda element: (element[1]["key"], element[0])))
        assert_that(loaded, equal_to([(k, splits.assign_split(k, fractions))
                                      for k in keys]))


def test_load_images_rejection_message_for_missing_file(tmp_path):
    record = ImageRecord(key="k", uri=str(tmp_path / "gone.png"), label="cat")
    with TestPipeline(runner=RUNNER) as p:
        rejected = (p | beam.Create([record])
                    | beam.ParDo(image_loading.LoadImages(splits.SplitFractions()))
                    .with_outputs(image_loading.REJECTED, main="loaded"))[
                        image_loading.REJECTED]
        assert_that(rejected | beam.Map(lambda r: r.message.startswith("Cannot read file:")),
                    equal_to([True]))




def test_validate_image_bytes_truncated_png_is_undecodable():
    rng = np.random.default_rng(0)
    png = tf.io.encode_png(rng.integers(0, 255, (40, 40, 3), dtype=np.uint8)).numpy()
    reason, message = image_loading.validate_image_bytes(png[: len(png) // 2])
    assert reason == "undecodable_image"
    assert "PNG" in message


def test_validate_image_bytes_refuses_large_header_before_decoding(monkeypatch):
    png = tf.io.encode_png(np.zeros((3000, 3000, 1), np.uint8)).numpy()

    def no_decode(data: bytes) -> tuple[int, int]:
        raise AssertionError("decoded an image whose header is over the limit")

    monkeypatch.setattr(image_loading.image_codec, "check_decodable", no_decode)
    reason, _ = image_loading.validate_image_bytes(
        png, image_loading.InputLimits(max_image_pixels=1_000_000))
    assert reason == "image_too_large"


def test_validate_image_bytes_file_too_large():
    data = b"\x89PNG\r\n\x1a\n" + bytes(2000)
    reason, _ = image_loading.validate_image_bytes(
        data, image_loading.InputLimits(max_file_bytes=1000))
    assert reason == "file_too_large"


# --- read_bytes -----------------------------------------------------------------------

@pytest.mark.parametrize("size", [0, 1, 4095, 4096, 4097, 10_000])
def test_read_bytes_returns_the_whole_file_across_chunks(tmp_path, size):
    data = np.random.default_rng(size).integers(0, 256, size, np.uint8).tobytes()
    (tmp_path / "f").write_bytes(data)
    assert image_loading.read_bytes(str(tmp_path / "f"), 1_000_000, chunk_bytes=4096) == data
    assert image_loading.read_bytes(str(tmp_path / "f")) == data


@pytest.mark.parametrize("limit", [4095, 4096, 5000, 9_999])
def test_read_bytes_stops_one_byte_past_the_limit(tmp_path, limit):
    data = np.random.default_rng(0).integers(0, 256, 10_000, np.uint8).tobytes()
    (tmp_path / "f").write_bytes(data)
    assert image_loading.read_bytes(str(tmp_path / "f"), limit, chunk_bytes=4096) == (
        data[:limit + 1])


def test_read_bytes_file_exactly_at_the_limit_is_read_whole(tmp_path):
    (tmp_path / "f").write_bytes(b"x" * 5000)
    data = image_loading.read_bytes(str(tmp_path / "f"), 5000, chunk_bytes=4096)
    assert data == b"x" * 5000
    assert image_loading.validate_image_bytes(
        data, image_loading.InputLimits(max_file_bytes=5000))[0] != "file_too_large"


def test_read_bytes_never_asks_for_more_than_a_chunk(tmp_path, monkeypatch):
    # f.read(n) allocates n bytes up front: asking for --max_file_mb at once cost a
    # 64 MiB allocation per image.
    (tmp_path / "f").write_bytes(b"y" * 3000)
    requested = []
    real_open = image_loading.FileSystems.open

    class Recording:
        def __init__(self, f):
            self._f = f

        def read(self, n=-1):
            requested.append(n)
            return self._f.read(n)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self._f.close()

    monkeypatch.setattr(image_loading.FileSystems, "open",
                        lambda *a, **k: Recording(real_open(*a, **k)))
    assert image_loading.read_bytes(str(tmp_path / "f"), 64 << 20) == b"y" * 3000
    assert requested and max(requested) == image_loading.READ_CHUNK_BYTES


def test_read_bytes_refuses_a_non_positive_chunk(tmp_path):
    (tmp_path / "f").write_bytes(b"x")
    with pytest.raises(ValueError, match="chunk_bytes"):
        image_loading.read_bytes(str(tmp_path / "f"), 10, chunk_bytes=0)


def test_load_image_is_a_pure_function_of_the_record_and_its_file(tmp_path):
    data = _encode("png", 5, 7, (3, 2, 1))
    (tmp_path / "a.png").write_bytes(data)
    record = ImageRecord(key="cat/a.png", uri=str(tmp_path / "a.png"), label="cat",
                         split="validation")
    assert image_loading.load_image(record, splits.SplitFractions()) == (
        "validation", {"image": data, "label": "cat", "key": "cat/a.png"})
    rejection = image_loading.load_image(record, splits.SplitFractions(),
                                         allowed_labels=frozenset({"dog"}))
    assert (rejection.key, rejection.reason) == ("cat/a.png", "unknown_label")


@pytest.mark.parametrize("threads", [1, 3])
def test_load_images_output_and_counts_do_not_depend_on_threads(tmp_path, threads):
    # 20 records (more than 2 x threads in flight), every fourth one broken: the
    # outputs and their order within the bundle are the same for any
    # thread count, and every record comes out exactly once.
    records = []
    for i in range(20):
        path = tmp_path / f"{i:02d}.png"
        path.write_bytes(b"not an image" if i % 4 == 3 else _encode("png", 3, 3, (i, i, i)))
        records.append(ImageRecord(key=f"cat/{i:02d}.png", uri=str(path), label="cat",
                                   split="train"))
    fn = image_loading.LoadImages(splits.SplitFractions(), threads=threads)
    fn.setup()
    try:
        fn.start_bundle()
        outputs = [o for record in records for o in fn.process(record)]
        outputs += [o for o in fn.finish_bundle()]
    finally:
        fn.teardown()

    def key_of(output):
        value = getattr(output, "value", output)  # TaggedOutput / WindowedValue
        value = getattr(value, "value", value)
        return value.key if isinstance(value, image_loading.Rejection) else value[1]["key"]

    assert [key_of(o) for o in outputs] == [r.key for r in records]
    rejected = [o for o in outputs if isinstance(o, beam.pvalue.TaggedOutput)]
    assert [key_of(o) for o in rejected] == [f"cat/{i:02d}.png" for i in (3, 7, 11, 15, 19)]
    assert {o.tag for o in rejected} == {image_loading.REJECTED}


def test_load_images_refuses_zero_threads():
    with pytest.raises(ValueError, match="at least one thread"):
        image_loading.LoadImages(splits.SplitFractions(), threads=0)


def test_load_images_reports_beam_counters_from_its_pool(tmp_path):
    # The pool's threads have no Beam metrics context: counters must still add up.
    from apache_beam.metrics.metric import MetricsFilter

    records = []
    for i in range(12):
        path = tmp_path / f"{i:02d}.png"
        path.write_bytes(b"" if i % 3 == 0 else _encode("png", 3, 3, (i, i, i)))
        records.append(ImageRecord(key=f"cat/{i:02d}.png", uri=str(path), label="cat"))
    pipeline = TestPipeline(runner=RUNNER)
    _ = (pipeline | beam.Create(records)
         | beam.ParDo(image_loading.LoadImages(splits.SplitFractions(), threads=3))
         .with_outputs(image_loading.REJECTED, main="loaded"))
    result = pipeline.run()
    result.wait_until_finish()
    counters = {c.key.metric.name: c.committed for c in result.metrics().query(
        MetricsFilter().with_namespace("etl"))["counters"]}
    assert counters == {"images_loaded": 8, "rejected_empty_file": 4}
