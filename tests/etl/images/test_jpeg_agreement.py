"""The image job's one JPEG decode (libjpeg-turbo, strict, on the read threads) gives
exactly the pixels of the exported transform's own decode (TensorFlow), on a corpus
of layouts at every DCT scale; and the ops that follow give the transform's bytes."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from etl.images import codec, loading
from etl.images.batches import DecodedPixels, FinishImages
from etl.images.preprocessing import ImagePreprocessing
from tests import jpeg_corpus
from tests.image_loading import decode_jpeg_checked

RATIOS = (1, 2, 4, 8)


@pytest.fixture(scope="module")
def corpus() -> list[jpeg_corpus.CorpusJpeg]:
    return jpeg_corpus.corpus()


def _cases(corpus):
    for jpeg in corpus:
        for ratio in RATIOS:
            size = jpeg_corpus.image_size_for_ratio(jpeg.height, jpeg.width, ratio)
            if size is not None:
                yield jpeg, ratio, size


def test_corpus_covers_every_layout_scale_and_orientation(corpus):
    cases = list(_cases(corpus))
    assert {jpeg.layout for jpeg, _, _ in cases} == set(jpeg_corpus.LAYOUTS)
    assert {ratio for _, ratio, _ in cases} == set(RATIOS)
    assert {jpeg.orientation for jpeg, _, _ in cases} == set(range(1, 9))
    # Each layout is decoded at every scale.
    for layout in jpeg_corpus.LAYOUTS:
        assert {ratio for jpeg, ratio, _ in cases if jpeg.layout == layout} == set(RATIOS)


def test_jpeg_decode_ratio_follows_the_documented_rule():
    # ceil(shorter / ratio) >= 2 * image_size, the largest such ratio of 1, 2, 4, 8.
    assert codec.jpeg_decode_ratio(3024, 4032, 224) == 4  # 756 >= 448 > 378
    assert codec.jpeg_decode_ratio(4000, 6000, 224) == 8  # 500 >= 448
    assert codec.jpeg_decode_ratio(894, 1280, 224) == 1  # ceil(894 / 2) = 447
    assert codec.jpeg_decode_ratio(895, 1280, 224) == 2  # ceil(895 / 2) = 448
    assert codec.jpeg_decode_ratio(1280, 894, 224) == 1  # the shorter side rules
    assert codec.jpeg_decode_ratio(10, 10, 8192) == 1


def test_read_side_decode_equals_the_transforms_decode_bit_for_bit(corpus):
    compared = 0
    for jpeg, ratio, size in _cases(corpus):
        pixels = decode_jpeg_checked(jpeg.data, size, strict=True)
        assert isinstance(pixels, np.ndarray), jpeg.name
        expected = codec.decode_rgb(tf.constant(jpeg.data), image_size=size).numpy()
        assert pixels.shape == (-(-jpeg.height // ratio), -(-jpeg.width // ratio), 3)
        np.testing.assert_array_equal(pixels, expected, err_msg=f"{jpeg.name} at 1/{ratio}")
        compared += 1
    assert compared >= 4 * len(jpeg_corpus.LAYOUTS) * 2


def test_graph_decode_scale_agrees_with_jpeg_decode_ratio(corpus):
    for jpeg, ratio, size in _cases(corpus):
        assert codec.jpeg_decode_ratio(jpeg.height, jpeg.width, size) == ratio
        shape = codec.decode_rgb(tf.constant(jpeg.data), image_size=size).shape
        assert tuple(shape) == (-(-jpeg.height // ratio), -(-jpeg.width // ratio), 3)


def test_the_accurate_idct_is_what_makes_the_decoders_agree(corpus):
    # Not vacuous: TensorFlow's default (fast) IDCT gives other pixels at full scale.
    jpeg = next(j for j in corpus if j.layout == "420" and j.height == 757)
    pixels = decode_jpeg_checked(jpeg.data, 8192, strict=True)
    fast = tf.io.decode_jpeg(jpeg.data, channels=3).numpy()
    assert isinstance(pixels, np.ndarray)
    assert np.abs(pixels.astype(int) - fast).max() > 0


@pytest.mark.parametrize("image_format", ["jpeg", "png"])
def test_finishing_the_read_side_decode_equals_the_whole_preprocessing(corpus, image_format):
    # What the job stores for a decoded JPEG = what transform_fn's ops give for its bytes.
    # The whole corpus in one batch, as the job finishes a batch.
    config = ImagePreprocessing(image_size=24, image_format=image_format)
    whole = tf.function(lambda data: codec.preprocess(
        data, config.image_size, config.image_format, config.jpeg_quality))
    plans = [loading.plan_jpeg_decode(jpeg.data, config.image_size) for jpeg in corpus]
    pixels = [decode_jpeg_checked(jpeg.data, config.image_size, True)
              for jpeg in corpus]
    finished = FinishImages(config)(
        [DecodedPixels.of(p, plan) for p, plan in zip(pixels, plans, strict=True)],
        [jpeg.data for jpeg in corpus])
    for jpeg, done in zip(corpus, finished, strict=True):
        assert done.stored == whole(tf.constant(jpeg.data)).numpy(), jpeg.name


def test_layouts_outside_the_agreeing_set_are_left_to_the_transform():
    assert loading.plan_jpeg_decode(jpeg_corpus.cmyk_jpeg(0), 16) is None
    assert decode_jpeg_checked(jpeg_corpus.cmyk_jpeg(0), 16, strict=True) is None
    checked = loading.check_image(jpeg_corpus.cmyk_jpeg(0), image_size=16)
    assert (checked.jpeg, checked.header.mode) == (None, "CMYK")
