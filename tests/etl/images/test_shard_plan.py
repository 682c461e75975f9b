"""Unit tests of etl/images/shard_plan.py: size estimates and when a split is sampled."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from etl.core.transform.examples import serialize_example
from etl.images import codec, loading, shard_plan
from etl.images.preprocessing import ImagePreprocessing
from etl.images.sources import ImageRecord
from reader.format import contract

LIMITS = loading.InputLimits()


@pytest.mark.parametrize("size", [1, 10, 224, 512])
@pytest.mark.parametrize("encode", [
    lambda x: tf.io.encode_jpeg(x, quality=100), tf.io.encode_png])
def test_upper_bound_holds_for_uniform_noise(encode, size):
    # Noise is the least compressible content: the bound used to skip sampling.
    pixels = np.random.default_rng(0).integers(0, 256, (size, size, 3), dtype=np.uint8)
    assert len(encode(pixels).numpy()) < shard_plan.upper_bound_image_bytes(size)


def test_estimated_split_bytes_equals_serialized_examples_of_those_sizes():
    keys, labels = ["cat/0001.jpg", "dog/0002.jpg"], ["cat", "dog"]
    examples = [serialize_example({
        contract.IMAGE_KEY: b"\1" * 1000, contract.HEIGHT_KEY: 64, contract.WIDTH_KEY: 64,
        contract.CHANNELS_KEY: 3, contract.LABEL_KEY: 1,
        contract.LABEL_NAME_KEY: label.encode(), contract.SOURCE_KEY: key.encode()})
        for key, label in zip(keys, labels, strict=True)]
    estimate = shard_plan.estimated_split_bytes(
        2, sum(map(len, keys)), sum(map(len, labels)), 1000.0, 64)
    assert estimate == sum(map(len, examples))


def _photo_records(tmp_path, count: int) -> list[ImageRecord]:
    from sklearn.datasets import load_sample_images

    photo = load_sample_images().images[0]
    records = []
    for i in range(count):
        h, w = 120 + 20 * i, 200 - 10 * i
        path = tmp_path / f"{i}.jpg"
        path.write_bytes(tf.io.encode_jpeg(np.ascontiguousarray(photo[i:i + h, i:i + w]),
                                           quality=90).numpy())
        records.append(ImageRecord(key=f"c/{i}.jpg", uri=str(path), label="c", split="train"))
    return records


def test_mean_stored_image_bytes_is_the_mean_of_the_job_ops(tmp_path):
    records = _photo_records(tmp_path, 5)
    config = ImagePreprocessing(image_size=64)
    expected = np.mean([len(codec.preprocess(
        tf.constant(open(r.uri, "rb").read()), 64, "jpeg", 95).numpy()) for r in records])
    broken = ImageRecord(key="c/x.jpg", uri=str(tmp_path / "missing.jpg"), label="c")
    assert shard_plan.mean_stored_image_bytes([*records, broken], config, LIMITS) == (
        pytest.approx(expected))


def test_mean_stored_image_bytes_is_exact_for_raw_and_falls_back_to_it(tmp_path):
    raw = ImagePreprocessing(image_size=10, image_format="raw")
    assert shard_plan.mean_stored_image_bytes([], raw, LIMITS) == 300
    jpeg = ImagePreprocessing(image_size=10)
    gone = ImageRecord(key="k", uri=str(tmp_path / "gone.jpg"), label="c")
    assert shard_plan.mean_stored_image_bytes([gone], jpeg, LIMITS) == 300


def test_a_split_that_fits_one_shard_at_the_upper_bound_is_not_sampled(tmp_path):
    config = ImagePreprocessing(image_size=10)
    records = _photo_records(tmp_path, 3)
    sizes = {"train": (3, 30, 3)}
    one_example = shard_plan.estimated_split_bytes(
        1, 10, 1, shard_plan.upper_bound_image_bytes(10), 10)
    # Three examples at the 2x-raw bound need 3 x one_example bytes.
    assert shard_plan.fits_one_shard(3, 30, 3, config, 3 * one_example)
    assert not shard_plan.fits_one_shard(3, 30, 3, config, 3 * one_example - 1)
    assert list(shard_plan._measure_sample(("train", records), config, LIMITS, sizes,
                                           3 * one_example)) == []
    (measured,) = shard_plan._measure_sample(("train", records), config, LIMITS, sizes,
                                             3 * one_example - 1)
    assert measured[0] == "train" and 300 < measured[1] < 1500  # JPEG headers > raw


def test_stored_image_bytes_sizes_the_stored_square_without_its_turn():
    # The size sample runs the job's ops but leaves the EXIF orientation out (it
    # only turns or mirrors the stored square), and a damaged JPEG the shard step
    # will reject is left out.
    from tests.image_fixtures import corrupt_mid_stream, exif_jpeg, textured_jpeg

    pixels = tf.io.decode_jpeg(textured_jpeg(48, 160)).numpy()
    data = exif_jpeg(pixels, 6)
    config = ImagePreprocessing(image_size=32, image_format="png")
    unturned, turned = (len(codec.preprocess(
        tf.constant(data), 32, "png", 95, apply_exif_orientation=turn).numpy())
        for turn in (False, True))
    assert turned != unturned  # This photo tells the two apart.
    assert shard_plan.stored_image_bytes(data, config, LIMITS) == unturned
    damaged = corrupt_mid_stream(textured_jpeg(), seed=0)
    assert shard_plan.stored_image_bytes(damaged, config, LIMITS) is None
    lenient = loading.InputLimits(strict_decoding=False)
    assert shard_plan.stored_image_bytes(damaged, config, lenient) is not None


@pytest.mark.parametrize("image_format", ["jpeg", "png"])
def test_the_turn_left_out_of_the_sample_moves_stored_sizes_by_under_three_percent(
        image_format):
    # What justifies leaving the orientation out of the estimate, on real photo
    # content: every turn and mirror of the stored square, against the upright size.
    from sklearn.datasets import load_sample_images

    from tests.image_fixtures import exif_jpeg

    sizes: dict[int, list[int]] = {orientation: [] for orientation in range(1, 9)}
    for photo in load_sample_images().images:
        for top in (0, 60, 120):
            crop = np.ascontiguousarray(photo[top:top + 300, top:top + 400])
            for orientation in sizes:
                # Pillow writes the same pixel data each time; only the tag differs.
                oriented = tf.constant(exif_jpeg(crop, orientation))
                assert int(codec.exif.read_orientation(oriented)) == orientation
                sizes[orientation].append(len(codec.preprocess(
                    oriented, 224, image_format, 95).numpy()))
    upright = np.array(sizes[1], dtype=np.float64)
    for orientation in range(2, 9):
        ratios = np.array(sizes[orientation]) / upright
        assert np.all(np.abs(ratios - 1) < 0.03), (orientation, ratios)
        assert abs(np.sum(sizes[orientation]) / np.sum(upright) - 1) < 0.015
