"""The image job decodes each JPEG once, on its read threads, and still stores exactly
``transform_fn(raw bytes)``: one job run over a corpus of JPEG layouts (every
agreeing layout, EXIF orientations in both TIFF byte orders, odd sizes), CMYK JPEGs
and PNGs, which take the transform's own decode, and a damaged JPEG."""

from __future__ import annotations

import collections
import hashlib
import os

import pytest
import tensorflow as tf
import tensorflow_transform as tft

from etl.images import shards
from tests import image_fixtures, jpeg_corpus
from tests.job_runs import read_split, run_images_job

IMAGE_SIZE = 40  # Decodes the corpus at 1/8, 1/4 and full scale.


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.fixture(scope="module")
def corpus_run(tmp_path_factory):
    """(input root, {key: file bytes}, output dir, manifest, simplejpeg decodes per file
    digest, keys the whole transform_fn decoded)."""
    import simplejpeg

    root = str(tmp_path_factory.mktemp("jpeg_corpus"))
    files = {f"jpeg/{jpeg.name}.jpg": jpeg.data for jpeg in jpeg_corpus.corpus()}
    # EXIF in a little-endian ("II") TIFF header; the corpus's are big-endian.
    files["jpeg/o6_little_endian.jpg"] = image_fixtures.exif_jpeg(
        jpeg_corpus.photo_crop(7, 131, 250), 6, endian="<")
    files.update({f"cmyk/{i}.jpg": jpeg_corpus.cmyk_jpeg(i) for i in range(2)})
    files.update({f"png/{i}.png": image_fixtures._encode("png", 30 + i, 50, (i, 9, 99))
                  for i in range(2)})
    files["bad/damaged.jpg"] = image_fixtures.corrupt_mid_stream(
        image_fixtures.textured_jpeg(seed=3), seed=3)
    for key, data in files.items():
        os.makedirs(os.path.dirname(os.path.join(root, key)), exist_ok=True)
        with open(os.path.join(root, key), "wb") as f:
            f.write(data)

    decodes: collections.Counter[str] = collections.Counter()
    whole: list[str] = []
    real_decode = simplejpeg.decode_jpeg

    def counting_decode(data, *args, **kwargs):
        decodes[_digest(bytes(data))] += 1
        return real_decode(data, *args, **kwargs)

    class RecordingTransform(shards.ImageTransform):
        def __call__(self, batch):
            whole.extend(item.record.key for item in batch if item.pixels is None)
            return super().__call__(batch)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(simplejpeg, "decode_jpeg", counting_decode)
        patch.setattr(shards, "ImageTransform", RecordingTransform)
        out = str(tmp_path_factory.mktemp("jpeg_corpus_out"))
        manifest = run_images_job(root, out, f"--image_size={IMAGE_SIZE}",
                                  "--split_fractions=1,0,0", "--num_shards=1")
    return root, files, out, manifest, decodes, whole


def test_job_stores_transform_fn_of_the_raw_bytes_for_every_layout(corpus_run):
    _, files, out, manifest, _, _ = corpus_run
    rows = read_split(out, manifest, "train")
    keys = sorted(key for key in files if not key.startswith("bad/"))
    assert sorted(rows) == keys
    served = tft.TFTransformOutput(out).transform_raw_features({
        "image": tf.constant([files[key] for key in keys]),
        "label": tf.constant([key.split("/")[0] for key in keys]),
        "key": tf.constant(keys),
    })
    for i, key in enumerate(keys):
        assert served["image"][i].numpy() == rows[key]["image"], key
    # Not vacuous: no two stored images alike.
    assert len({rows[key]["image"] for key in keys}) == len(keys)


def test_job_decodes_each_agreeing_jpeg_once_and_never_in_the_transform(corpus_run):
    _, files, _, _, decodes, whole = corpus_run
    for key, data in files.items():
        if key.startswith("jpeg/"):
            assert decodes[_digest(data)] == 1, key
    # Only the layouts the two decoders may not agree on reach transform_fn's decode.
    assert sorted(whole) == sorted(k for k in files if k.startswith(("cmyk/", "png/")))


def test_job_refuses_a_damaged_jpeg_among_them(corpus_run):
    _, _, out, manifest, _, _ = corpus_run
    assert manifest["rejected"]["by_reason"] == {"corrupt_image_data": 1}
    lines = open(os.path.join(out, "errors", "rejected.jsonl")).read().splitlines()
    assert len(lines) == 1 and '"bad/damaged.jpg"' in lines[0]



def test_manifest_records_the_decode_rule(corpus_run):
    decode = corpus_run[3]["preprocessing"]["decode"]
    assert "INTEGER_ACCURATE" in decode
    assert "ceil(shorter side / r) >= 2 x image_size" in decode
