"""End-to-end DirectRunner (FnApiRunner) tests of ``python -m pipelines.images``."""

from __future__ import annotations

import glob
import gzip
import hashlib
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_transform as tft

from etl.core import splits
from reader import contract
from tests.conftest import TEST_IMAGE_SIZE, output_digests, read_split, run_images_job


def all_records(out: str, manifest: dict) -> dict[str, tuple[str, dict]]:
    return {key: (split, row) for split in contract.SPLITS
            for key, row in read_split(out, manifest, split).items()}




def test_images_job_round_trips_pixels_and_labels(image_folder, png_dataset):
    _, good, _ = image_folder
    out, manifest = png_dataset
    records = all_records(out, manifest)
    assert sorted(records) == sorted(image.key for image in good)
    vocab = manifest["label_vocab"]
    for image in good:
        _, row = records[image.key]
        pixels = tf.io.decode_png(row["image"]).numpy()
        assert pixels.shape == (TEST_IMAGE_SIZE, TEST_IMAGE_SIZE, 3)
        expected = np.broadcast_to(np.array(image.rgb, np.int32), pixels.shape)
        tolerance = 3 if image.lossy else 0
        assert np.abs(pixels.astype(np.int32) - expected).max() <= tolerance, image.key
        assert (row["height"], row["width"], row["channels"]) == (
            TEST_IMAGE_SIZE, TEST_IMAGE_SIZE, 3)
        assert row["label_name"].decode() == image.label
        assert vocab[row["label"]] == image.label


def test_images_job_splits_by_key_hash(png_dataset):
    out, manifest = png_dataset
    fractions = splits.SplitFractions()
    for key, (split, _) in all_records(out, manifest).items():
        assert split == splits.assign_split(key, fractions), key


def test_images_job_manifest_describes_files(png_dataset):
    out, manifest = png_dataset
    assert manifest["format_version"] == contract.FORMAT_VERSION
    assert set(manifest["versions"]) == {"python", "tensorflow", "tensorflow_transform",
                                         "apache_beam"}
    assert manifest["preprocessing"]["image_size"] == TEST_IMAGE_SIZE
    assert manifest["preprocessing"]["image_format"] == "png"
    total = 0
    for split in contract.SPLITS:
        entry = manifest["splits"][split]
        assert entry["num_records"] == sum(s["num_records"] for s in entry["shards"])
        assert entry["num_records"] == sum(manifest["label_counts"][split].values())
        n = len(entry["shards"])
        for index, shard in enumerate(entry["shards"]):
            assert shard["path"] == f"{split}/images-{split}-{index:05d}-of-{n:05d}.tfrecord.gz"
            path = os.path.join(out, shard["path"])
            data = open(path, "rb").read()
            assert shard["num_bytes"] == len(data)
            assert shard["sha256"] == hashlib.sha256(data).hexdigest()
            assert shard["num_records"] > 0
            assert data[:2] == b"\x1f\x8b"  # GZIP magic
        total += entry["num_records"]
    assert total == len(all_records(out, manifest))


def test_images_job_rejects_bad_files_and_reconciles(image_folder, png_dataset):
    _, good, bad = image_folder
    out, manifest = png_dataset
    with open(os.path.join(out, contract.ERRORS_DIRNAME, contract.REJECTED_FILENAME)) as f:
        rejected = [json.loads(line) for line in f]
    assert {r["key"]: r["reason"] for r in rejected} == bad
    assert all(r["message"] and r["source"] for r in rejected)
    assert manifest["rejected"]["count"] == len(bad)
    written = sum(manifest["splits"][s]["num_records"] for s in contract.SPLITS)
    assert written + manifest["rejected"]["count"] == len(good) + len(bad)


def test_images_job_label_vocabulary_fit_on_train_only(tmp_path):
    # "zebra" exists only in an explicit test split folder: it must not enter the
    # vocabulary, and its examples get the documented unknown id -1.
    from tests import image_fixtures

    root = tmp_path / "in"
    image_fixtures.write_image_folder(str(root / "train"), copies=1)
    image_fixtures.write_image_folder(str(root / "test"), copies=1)
    os.rename(root / "test" / "dog", root / "test" / "zebra")
    out = str(tmp_path / "out")
    manifest = run_images_job(str(root), out, "--image_format=png")
    assert sorted(manifest["label_vocab"]) == ["bird", "cat", "dog"]
    test_rows = read_split(out, manifest, "test")
    zebra_ids = {int(r["label"]) for r in test_rows.values() if r["label_name"] == b"zebra"}
    assert zebra_ids == {-1}
    # Split folders take precedence over hashing: every train/ file is in train.
    assert manifest["splits"]["validation"]["num_records"] == 0
    assert all(k.startswith("train/") for k in read_split(out, manifest, "train"))
    assert manifest["label_counts"]["test"]["zebra"] == len(image_fixtures.KINDS)


def test_images_job_serving_parity(image_folder, tmp_path):
    """transform_fn applied to raw file bytes reproduces the stored image bytes."""
    root, good, _ = image_folder
    out = str(tmp_path / "jpeg")
    manifest = run_images_job(root, out)  # Default storage: JPEG.
    records = all_records(out, manifest)
    transform_output = tft.TFTransformOutput(out)
    keys = [image.key for image in good]
    raw = {
        "image": tf.constant([open(os.path.join(root, k), "rb").read() for k in keys]),
        "label": tf.constant([image.label for image in good]),
        "key": tf.constant(keys),
    }
    served = transform_output.transform_raw_features(raw)
    for i, key in enumerate(keys):
        _, row = records[key]
        assert served["image"][i].numpy() == row["image"], key
        assert int(served["label"][i]) == int(row["label"])


@pytest.mark.parametrize("flags", [
    ("--direct_num_workers=2", "--direct_running_mode=multi_threading"),
    ("--direct_num_workers=2", "--direct_running_mode=multi_processing"),
])
def test_images_job_is_byte_identical_across_workers(image_folder, tmp_path, flags):
    root, _, _ = image_folder
    base = run_images_job(root, str(tmp_path / "a"), "--num_shards=3")
    other = run_images_job(root, str(tmp_path / "b"), "--num_shards=3", *flags)
    assert base == other
    digests = output_digests(str(tmp_path / "a"))
    assert len(base["splits"]["train"]["shards"]) == 3
    num_shards = sum(len(base["splits"][s]["shards"]) for s in contract.SPLITS)
    assert len([p for p in digests if p.endswith(".tfrecord.gz")]) == num_shards
    assert digests == output_digests(str(tmp_path / "b"))


def test_images_job_sizes_shards_from_target(image_folder, tmp_path):
    root, good, _ = image_folder
    # ~1 KB target: several shards per split, but never an empty one.
    manifest = run_images_job(root, str(tmp_path / "out"), "--target_shard_mb=0.001",
                              "--image_format=raw")
    train = manifest["splits"]["train"]
    assert 1 < len(train["shards"]) <= train["num_records"]
    assert all(s["num_records"] > 0 for s in train["shards"])
    records = all_records(str(tmp_path / "out"), manifest)
    image = good[0]
    _, row = records[image.key]
    pixels = np.frombuffer(row["image"], np.uint8).reshape(TEST_IMAGE_SIZE, TEST_IMAGE_SIZE, 3)
    assert np.abs(pixels.astype(int) - np.array(image.rgb)).max() <= 3


@pytest.mark.parametrize("suffix", ["csv", "jsonl"])
def test_images_job_reads_manifest_with_split_column(image_folder, tmp_path, suffix):
    root, good, _ = image_folder
    chosen = good[:6]
    manifest_path = os.path.join(root, f"list.{suffix}")  # Paths relative to it.
    with open(manifest_path, "w") as f:
        if suffix == "csv":
            f.write("path,label,split\n")
            for i, image in enumerate(chosen):
                f.write(f"{image.key},{image.label},{'train' if i < 3 else 'val'}\n")
            f.write("missing-columns-row\n")
        else:
            for i, image in enumerate(chosen):
                f.write(json.dumps({"path": image.key, "label": image.label,
                                    "split": "train" if i < 3 else "validation"}) + "\n")
            f.write("{not json\n")
    # 1 malformed line in 7 is above the default 10% error threshold.
    manifest = run_images_job(manifest_path, str(tmp_path / "out"),
                              "--max_error_fraction=0.5")
    # The split column wins over hashing.
    assert manifest["splits"]["train"]["num_records"] == 3
    assert manifest["splits"]["validation"]["num_records"] == 3
    assert manifest["splits"]["test"]["num_records"] == 0
    assert manifest["rejected"]["by_reason"] == {"malformed_manifest_row": 1}


def test_images_job_gzip_level_changes_file_bytes_not_records(image_folder, png_dataset,
                                                             tmp_path):
    root, _, _ = image_folder
    default_out, default_manifest = png_dataset
    out = str(tmp_path / "stored")
    manifest = run_images_job(root, out, "--image_format=png", "--gzip_level=0")
    assert manifest["preprocessing"]["gzip_level"] == 0
    # 16 px PNGs are small enough for deflate to pay: the default deflates them.
    assert default_manifest["preprocessing"]["gzip_level"] == 6
    assert all_records(out, manifest) == all_records(default_out, default_manifest)
    assert (manifest["splits"]["train"]["num_bytes"]
            > default_manifest["splits"]["train"]["num_bytes"])
    # At level 0 each file is still a GZIP stream (Python's gzip inflates it), no
    # smaller than the records it holds.
    for shard in manifest["splits"]["train"]["shards"]:
        with open(os.path.join(out, shard["path"]), "rb") as f:
            stored = f.read()
        assert len(stored) > len(gzip.decompress(stored)) > 0
    with pytest.raises(ValueError, match="--gzip_level must be an integer from 0"):
        run_images_job(root, str(tmp_path / "refused"), "--gzip_level=10")
    assert not os.path.exists(tmp_path / "refused")


@pytest.mark.parametrize("flags,level", [
    # Photo-sized JPEG and PNG records, compressed already: stored.
    (["--image_format=jpeg"], 0),
    (["--image_format=png"], 0),
    (["--image_format=jpeg", "--image_size=192"], 0),
    (["--image_format=png", "--image_size=64"], 0),
    # Small records, where the tables every JPEG repeats weigh, and raw pixels: deflated.
    (["--image_format=jpeg", "--image_size=191"], 6),
    (["--image_format=png", "--image_size=63"], 6),
    (["--image_format=raw"], 6),
    # The flag wins.
    (["--image_format=jpeg", "--gzip_level=6"], 6),
    (["--image_format=raw", "--gzip_level=0"], 0),
])
def test_images_job_default_gzip_level_follows_the_stored_records(image_folder, tmp_path,
                                                                  flags, level):
    from pipelines import images

    root, _, _ = image_folder
    options = images.ImagesOptions([f"--input={root}", f"--output_dir={tmp_path}", *flags])
    job = images.ImageJob.from_options(options)
    assert job.output.gzip_level == level
    assert job.describe_preprocessing()["gzip_level"] == level


def test_images_cli_reports_missing_input_flag(tmp_path):
    result = subprocess.run([sys.executable, "-m", "pipelines.images",
                             f"--output_dir={tmp_path}"], capture_output=True, text=True)
    assert result.returncode != 0
    assert "--input is required" in result.stderr


def test_images_job_refuses_finished_output_without_overwrite(image_folder, tmp_path):
    root, _, _ = image_folder
    out = str(tmp_path / "out")
    run_images_job(root, out, "--num_shards=2")
    with pytest.raises(ValueError, match="--overwrite"):
        run_images_job(root, out)
    # With --overwrite the old dataset is replaced entirely: no stale shard remains.
    manifest = run_images_job(root, out, "--overwrite", "--num_shards=1")
    on_disk = sorted(os.path.relpath(p, out)
                     for p in glob.glob(os.path.join(out, "*", "*.tfrecord.gz")))
    listed = sorted(s["path"] for split in contract.SPLITS
                    for s in manifest["splits"][split]["shards"])
    assert on_disk == listed
    assert not os.path.exists(os.path.join(out, "tmp"))


def test_images_job_fails_without_train_examples(image_folder, tmp_path):
    root, good, _ = image_folder
    manifest_path = os.path.join(root, "eval_only.csv")
    with open(manifest_path, "w") as f:
        f.write("path,label,split\n")
        f.writelines(f"{image.key},{image.label},test\n" for image in good[:2])
    out = tmp_path / "out"
    with pytest.raises(Exception, match="train split is empty"):
        run_images_job(manifest_path, str(out))
    assert not (out / contract.MANIFEST_FILENAME).exists()


# --- Issue #12: the fused shard step on real content, isolation and accounting -------

def _write(path, data: bytes) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)


def test_images_job_label_vocabulary_order_is_exactly_the_documented_one(tmp_path):
    # Decreasing train frequency, ties in reverse byte order (docs/FORMAT.md); the
    # stored ids are positions in that list.
    from tests.image_fixtures import _encode

    train_counts = {"b": 3, "a": 2, "c": 2, "Z": 2, "d": 1}
    for label, count in train_counts.items():
        for i in range(count):
            _write(str(tmp_path / "in" / "train" / label / f"{i}.png"),
                   _encode("png", 4, 4, (i, 9, 9)))
    out = str(tmp_path / "out")
    manifest = run_images_job(str(tmp_path / "in"), out, "--image_format=png")
    by_bytes_descending = sorted(train_counts, key=lambda label: label.encode(), reverse=True)
    expected = sorted(by_bytes_descending, key=lambda label: -train_counts[label])
    assert expected == ["b", "c", "a", "Z", "d"]  # the rule, worked by hand
    assert manifest["label_vocab"] == expected
    rows = read_split(out, manifest, "train")
    assert {(r["label_name"].decode(), int(r["label"])) for r in rows.values()} == {
        (label, expected.index(label)) for label in train_counts}


def _good_and_corrupt_manifest(root, corrupt_rows: list[tuple[str, str]],
                               validation_keys: tuple[str, ...] = tuple(
                                   f"good/v{i}.png" for i in range(4))) -> str:
    """A CSV manifest: 6 good train images and the good validation images (one colour
    each), plus the given (key, split) rows whose files are truncated JPEGs."""
    from tests.image_fixtures import _encode

    rows = [(f"good/t{i}.png", "train") for i in range(6)]
    rows += [(key, "validation") for key in validation_keys]
    for i, (key, _) in enumerate(rows):
        _write(os.path.join(root, key), _encode("png", 6, 5, (20 * i, 7, 200 - 9 * i)))
    rng = np.random.default_rng(3)
    jpeg = tf.io.encode_jpeg(rng.integers(0, 255, (48, 48, 3), dtype=np.uint8)).numpy()
    for key, _ in corrupt_rows:
        _write(os.path.join(root, key), jpeg[: len(jpeg) // 2])
    path = os.path.join(root, f"manifest-{len(corrupt_rows)}.csv")
    with open(path, "w") as f:
        f.write("path,label,split\n")
        for key, split in rows + corrupt_rows:
            f.write(f"{key},{'cat' if 't' in os.path.basename(key) else 'dog'},{split}\n")
    return path


def test_images_job_isolates_a_corrupt_image_inside_a_batch(tmp_path):
    # With --lenient_decoding the truncated JPEG passes the read checks and fails
    # inside the transform, in the same batch as the good validation images: only it
    # becomes a dead letter, and the shards are byte-identical to a run without it.
    # By default the strict check finds it while reading, with the same reason code.
    root = str(tmp_path / "in")
    clean = _good_and_corrupt_manifest(root, [])
    dirty = _good_and_corrupt_manifest(root, [("bad/v-cut.jpg", "validation")])
    clean_out = str(tmp_path / "clean")
    clean_manifest = run_images_job(clean, clean_out, "--num_shards=1", "--max_error_fraction=0.5")
    clean_shards = {p: d for p, d in output_digests(clean_out).items()
                    if p.endswith(".tfrecord.gz")}
    for flags, message in (
            (["--lenient_decoding"], "TensorFlow cannot decode this JPEG file: "),
            ([], "JPEG data ends before the image does (truncated): libjpeg: ")):
        dirty_out = str(tmp_path / f"dirty{len(flags)}")
        dirty_manifest = run_images_job(dirty, dirty_out, "--num_shards=1",
                                        "--max_error_fraction=0.5", *flags)
        with open(os.path.join(dirty_out, contract.ERRORS_DIRNAME,
                               contract.REJECTED_FILENAME)) as f:
            (rejected,) = [json.loads(line) for line in f]
        assert (rejected["key"], rejected["reason"]) == ("bad/v-cut.jpg", "undecodable_image")
        assert rejected["message"].startswith(message)
        assert dirty_manifest["inputs"] == 11 and dirty_manifest["rejected"]["count"] == 1
        assert dirty_manifest["splits"]["validation"]["num_records"] == 4
        shards = {p: d for p, d in output_digests(dirty_out).items()
                  if p.endswith(".tfrecord.gz")}
        assert shards == clean_shards
        assert dirty_manifest["splits"] == clean_manifest["splits"]


def _keys_in_shard(prefix: str, shard: int, num_shards: int, count: int,
                   suffix: str = ".jpg") -> list[str]:
    from etl.core import sharding

    keys = (f"{prefix}{i}{suffix}" for i in range(10_000))
    return [k for k in keys if sharding.shard_of(k, num_shards) == shard][:count]


def test_images_job_drops_shards_whose_every_record_is_rejected(tmp_path):
    # Validation, 2 shards: provisional shard 1 holds only corrupt images (shard 0
    # the 4 good ones), so one file remains, renumbered 0 of 1. Test: every record
    # corrupt, so no shard file at all. Nothing is lost: inputs = written + rejected.
    good_validation = tuple(_keys_in_shard("good/v", 0, 2, 4, suffix=".png"))
    corrupt = [(k, "validation") for k in _keys_in_shard("bad/v", 1, 2, 2)]
    corrupt += [(k, "test") for k in _keys_in_shard("bad/t", 0, 2, 1)]
    corrupt += [(k, "test") for k in _keys_in_shard("bad/t", 1, 2, 1)]
    path = _good_and_corrupt_manifest(str(tmp_path / "in"), corrupt, good_validation)
    out = str(tmp_path / "out")
    manifest = run_images_job(path, out, "--num_shards=2", "--max_error_fraction=0.5")
    validation = manifest["splits"]["validation"]
    assert [s["path"] for s in validation["shards"]] == [
        "validation/images-validation-00000-of-00001.tfrecord.gz"]
    assert validation["num_records"] == 4
    assert manifest["splits"]["test"] == {"num_records": 0, "num_bytes": 0, "shards": []}
    assert not os.path.exists(os.path.join(out, "test")) or not os.listdir(
        os.path.join(out, "test"))
    assert sorted(os.listdir(os.path.join(out, "validation"))) == [
        "images-validation-00000-of-00001.tfrecord.gz"]
    written = sum(manifest["splits"][s]["num_records"] for s in contract.SPLITS)
    assert (manifest["inputs"], written, manifest["rejected"]["count"]) == (14, 10, 4)
    assert manifest["rejected"]["by_reason"] == {"undecodable_image": 4}


def test_images_analysis_reads_only_the_label_column(monkeypatch, tmp_path):
    # Image bytes never enter tf.Transform's analysis: the analyzers' inputs are
    # found by tracing preprocessing_fn, and a preprocessing_fn whose analyzers would
    # read the image is refused when the pipeline is built.
    import apache_beam as beam

    from etl.core.analysis import analyze_input_columns
    from etl.images import preprocessing as image_preprocessing
    from pipelines import images

    assert analyze_input_columns(image_preprocessing.preprocessing_fn,
                                 image_preprocessing.RAW_FEATURE_SPEC) == ["label"]

    original = image_preprocessing.preprocessing_fn

    def image_reading_fn(inputs, *, config=None):
        outputs = original(inputs, config=config or image_preprocessing.ImagePreprocessing())
        outputs["mean_length"] = tft.mean(tf.strings.length(inputs["image"]))
        return outputs

    assert analyze_input_columns(image_reading_fn, image_preprocessing.RAW_FEATURE_SPEC) == [
        "image", "label"]
    monkeypatch.setattr(image_preprocessing, "preprocessing_fn", image_reading_fn)
    os.makedirs(tmp_path / "in" / "cat")
    job = images.ImageJob.from_options(images.ImagesOptions([
        f"--input={tmp_path / 'in'}", f"--output_dir={tmp_path / 'out'}"]))
    with pytest.raises(AssertionError, match="image bytes never enter the analysis"):
        images.build_pipeline(beam.Pipeline(), job)


def _photo_crops(root: str) -> dict[str, tuple[int, int]]:
    """Crops of scikit-learn's two sample photos (427x640), JPEG q95, at varied sizes
    and aspect ratios, upscaled and downscaled by the job; key → (height, width)."""
    from PIL import Image
    from sklearn.datasets import load_sample_images

    photos = load_sample_images().images
    shapes = [(427, 640), (300, 180), (224, 224), (150, 400), (120, 90), (411, 333),
              (256, 600), (200, 201)]
    written = {}
    for i, (h, w) in enumerate(shapes):
        photo = photos[i % 2]
        top, left = (photo.shape[0] - h) // 3, (photo.shape[1] - w) // 4
        key = f"{'china' if i % 2 == 0 else 'flower'}/{i}-{h}x{w}.jpg"
        os.makedirs(os.path.join(root, os.path.dirname(key)), exist_ok=True)
        Image.fromarray(photo[top:top + h, left:left + w]).save(os.path.join(root, key),
                                                                quality=95)
        written[key] = (h, w)
    return written


def _pillow_reference(path: str, size: int, exif_transpose: bool = False) -> np.ndarray:
    """The documented preprocessing, independently: Pillow decode (turned upright by
    Pillow's ``ImageOps.exif_transpose`` if asked), bilinear resize of the shorter
    side (antialiased when shrinking), centre crop."""
    from PIL import Image, ImageOps

    image = Image.open(path)
    if exif_transpose:
        image = ImageOps.exif_transpose(image)
    image = image.convert("RGB")
    w, h = image.size
    short = min(h, w)
    new_h, new_w = max(size, round(h * size / short)), max(size, round(w * size / short))
    resized = np.asarray(image.resize((new_w, new_h), Image.BILINEAR), dtype=np.float64)
    top, left = (new_h - size) // 2, (new_w - size) // 2
    return resized[top:top + size, left:left + size]


def _psnr(a: np.ndarray, b: np.ndarray) -> float:
    mse = float(np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2))
    return float("inf") if mse == 0 else 10 * np.log10(255.0 ** 2 / mse)


def _stored_photos(root: str, out: str, *flags: str) -> tuple[dict, dict[str, np.ndarray]]:
    """Runs the job at 224 px, lossless (PNG), every image in train; returns the
    manifest and each key's stored pixels."""
    manifest = run_images_job(root, out, "--image_size=224", "--image_format=png",
                              "--split_fractions=1,0,0", *flags)
    rows = read_split(out, manifest, "train")
    return manifest, {key: tf.io.decode_png(row["image"]).numpy() for key, row in rows.items()}


def test_images_job_stores_photos_as_the_documented_resize_and_crop(tmp_path):
    # Real photo content at the default 224 px, lossless storage: every stored image
    # is within a PSNR bound of Pillow's rendering of the documented rule (the two
    # libraries' bilinear filters and rounding differ slightly; a wrong crop offset,
    # scale or channel order drops PSNR far below the bound).
    root = str(tmp_path / "in")
    crops = _photo_crops(root)
    _, stored_photos = _stored_photos(root, str(tmp_path / "out"))
    assert sorted(stored_photos) == sorted(crops)
    for key in crops:
        stored = stored_photos[key]
        assert stored.shape == (224, 224, 3)
        reference = _pillow_reference(os.path.join(root, key), 224)
        assert _psnr(stored, reference) > 30.0, key
        # The bound has teeth: a crop one eighth off-centre is far below it.
        shifted = np.roll(reference, 28, axis=1)
        assert _psnr(stored, shifted) < 25.0, key


def test_images_job_withholds_a_dataset_whose_counts_do_not_reconcile(image_folder, tmp_path,
                                                                       monkeypatch):
    # A shard step that silently lost an image (simulated): inputs != written +
    # rejected, so no manifest; the reason is recorded in errors/failure.json and
    # the launcher raises it with its type.
    from etl.core import accounting
    from etl.images import shards as image_shards

    real = image_shards.process_shard

    def losing_one(*args, **kwargs):
        yield from list(real(*args, **kwargs))[:-1]

    monkeypatch.setattr(image_shards, "process_shard", losing_one)
    root, _, _ = image_folder
    out = str(tmp_path / "out")
    with pytest.raises(accounting.ReconciliationError, match="an input was lost"):
        run_images_job(root, out, "--max_error_fraction=0.5")
    assert not os.path.exists(os.path.join(out, contract.MANIFEST_FILENAME))
    failure = json.load(open(os.path.join(out, contract.ERRORS_DIRNAME, "failure.json")))
    assert failure["error"] == "ReconciliationError"


# --- Issue #14: image fidelity --------------------------------------------------------

def _oriented_photos(root: str) -> dict[str, int]:
    """A 300 x 420 (h x w) photo crop saved by Pillow as JPEG q95 with each EXIF
    orientation 1-8 (big-endian "MM" TIFF header, Pillow's default), and once more
    with orientation 6 in a little-endian "II" header; key -> orientation."""
    from PIL import Image
    from sklearn.datasets import load_sample_images

    photo = Image.fromarray(load_sample_images().images[0][60:360, 100:520])
    written = {}
    for orientation, endian in [*((o, ">") for o in range(1, 9)), (6, "<")]:
        exif = Image.Exif()
        exif.endian = endian
        exif[0x0112] = orientation
        key = f"photo/o{orientation}{'-le' if endian == '<' else ''}.jpg"
        os.makedirs(os.path.join(root, "photo"), exist_ok=True)
        photo.save(os.path.join(root, key), quality=95, exif=exif)
        written[key] = orientation
    return written


def test_images_job_stores_exif_oriented_photos_upright(tmp_path):
    # Real photo content with each EXIF orientation: every stored image is within a
    # PSNR bound of Pillow's exif_transpose followed by the documented resize and
    # centre crop, and far from the photo as stored (the bound has teeth);
    # --ignore_exif_orientation stores the pixels in their stored order.
    root = str(tmp_path / "in")
    photos = _oriented_photos(root)
    manifest, stored_photos = _stored_photos(root, str(tmp_path / "out"))
    assert manifest["preprocessing"]["apply_exif_orientation"] is True
    assert manifest["preprocessing"]["exif_orientation"].startswith("applied")
    assert sorted(stored_photos) == sorted(photos)
    for key, orientation in photos.items():
        stored = stored_photos[key]
        path = os.path.join(root, key)
        assert _psnr(stored, _pillow_reference(path, 224, exif_transpose=True)) > 30.0, key
        if orientation != 1:
            assert _psnr(stored, _pillow_reference(path, 224)) < 20.0, key
    kept, kept_photos = _stored_photos(root, str(tmp_path / "kept"),
                                       "--ignore_exif_orientation")
    assert kept["preprocessing"]["apply_exif_orientation"] is False
    assert kept["preprocessing"]["exif_orientation"].startswith("ignored")
    for key in photos:
        assert _psnr(kept_photos[key], _pillow_reference(os.path.join(root, key), 224)) > 30.0, key


def test_images_job_serving_parity_for_exif_oriented_photos(tmp_path):
    # transform_fn on the raw bytes of rotated and mirrored photos returns exactly
    # the stored bytes (default JPEG storage).
    root = str(tmp_path / "in")
    photos = _oriented_photos(root)
    out = str(tmp_path / "out")
    manifest = run_images_job(root, out, "--image_size=64", "--split_fractions=1,0,0")
    rows = read_split(out, manifest, "train")
    keys = sorted(photos)
    served = tft.TFTransformOutput(out).transform_raw_features({
        "image": tf.constant([open(os.path.join(root, k), "rb").read() for k in keys]),
        "label": tf.constant(["photo"] * len(keys)),
        "key": tf.constant(keys),
    })
    for i, key in enumerate(keys):
        assert served["image"][i].numpy() == rows[key]["image"], key
    # Not vacuous: the mirrored and rotated photos are stored differently.
    assert len({rows[key]["image"] for key in keys}) == 8


def _photo_jpegs(root: str, count: int) -> dict[str, bytes]:
    """``count`` JPEG crops (q90) of scikit-learn's sample photos under root/photo/."""
    import io

    from PIL import Image
    from sklearn.datasets import load_sample_images

    photos = load_sample_images().images
    written = {}
    for i in range(count):
        photo = photos[i % 2]
        crop = photo[10 * i:10 * i + 200 + 9 * i, 20 * i:20 * i + 260 - 7 * i]
        buf = io.BytesIO()
        Image.fromarray(crop).save(buf, "JPEG", quality=90)
        key = f"photo/{i}.jpg"
        _write(os.path.join(root, key), buf.getvalue())
        written[key] = buf.getvalue()
    return written


def test_images_job_rejects_mid_stream_corrupted_jpegs(tmp_path):
    # Three photos with 64 bytes of their entropy-coded data overwritten: TensorFlow
    # decodes them without an error (to smeared pixels). By default they are dead
    # letters (corrupt_image_data) and the good photos' shards are byte-identical to
    # a run without them; --lenient_decoding stores them, as before.
    from tests.image_fixtures import corrupt_mid_stream

    clean_root, dirty_root = str(tmp_path / "clean_in"), str(tmp_path / "dirty_in")
    good = _photo_jpegs(clean_root, 8)
    _photo_jpegs(dirty_root, 8)
    intact = _photo_jpegs(str(tmp_path / "intact"), 11)
    corrupt = {}
    for seed, i in enumerate((8, 9, 10)):
        key = f"photo/{i}.jpg"
        corrupt[key] = corrupt_mid_stream(intact[key], seed=seed)
        tf.io.decode_image(corrupt[key])  # The silent kind: TensorFlow decodes it.
        _write(os.path.join(dirty_root, key), corrupt[key])
    flags = ("--num_shards=1", "--image_format=png", "--max_error_fraction=0.5")
    clean_out, dirty_out, lenient_out = (str(tmp_path / n) for n in ("c", "d", "l"))
    run_images_job(clean_root, clean_out, *flags)
    manifest = run_images_job(dirty_root, dirty_out, *flags)
    with open(os.path.join(dirty_out, contract.ERRORS_DIRNAME, contract.REJECTED_FILENAME)) as f:
        rejected = {r["key"]: r for r in map(json.loads, f)}
    assert sorted(rejected) == sorted(corrupt)
    for record in rejected.values():
        assert record["reason"] == "corrupt_image_data"
        assert record["message"].startswith(
            "libjpeg reports damaged JPEG data: Corrupt JPEG data: ")
    written = sum(manifest["splits"][s]["num_records"] for s in contract.SPLITS)
    assert (manifest["inputs"], written, manifest["rejected"]["count"]) == (11, 8, 3)
    assert manifest["rejected"]["by_reason"] == {"corrupt_image_data": 3}
    assert sorted(k for _, (_, row) in all_records(dirty_out, manifest).items()
                  for k in [row["key"].decode()]) == sorted(good)

    def shards(out: str) -> dict[str, str]:
        return {p: d for p, d in output_digests(out).items() if p.endswith(".tfrecord.gz")}

    assert shards(dirty_out) == shards(clean_out)

    lenient = run_images_job(dirty_root, lenient_out, *flags, "--lenient_decoding")
    assert lenient["preprocessing"]["strict_decoding"] is False
    assert manifest["preprocessing"]["strict_decoding"] is True
    assert lenient["rejected"]["count"] == 0
    records = all_records(lenient_out, lenient)
    assert sorted(records) == sorted([*good, *corrupt])
    for key in corrupt:  # What was stored before: visibly broken pixels.
        _write(os.path.join(str(tmp_path / "intact"), key), intact[key])
        stored = tf.io.decode_png(records[key][1]["image"]).numpy()
        reference = _pillow_reference(os.path.join(str(tmp_path / "intact"), key),
                                      TEST_IMAGE_SIZE)
        assert _psnr(stored, reference) < 25.0, key


def test_images_job_composites_alpha_on_the_background(tmp_path):
    # Fixture RGBA PNG and WebP have alpha 77 everywhere over a solid colour: with
    # --alpha_background each stored pixel is round((c * 77 + bg * 178) / 255)
    # (lossless PNG storage); without it, the colour itself (alpha dropped).
    from tests import image_fixtures

    root = str(tmp_path / "in")
    good = [g for g in image_fixtures.write_image_folder(root, copies=1)]
    out = str(tmp_path / "out")
    manifest = run_images_job(root, out, "--image_format=png", "--split_fractions=1,0,0",
                              "--alpha_background=255,128,0")
    assert manifest["preprocessing"]["alpha_background"] == [255, 128, 0]
    assert "alpha composited" in manifest["preprocessing"]["color"]
    rows = read_split(out, manifest, "train")
    translucent = [g for g in good if g.key.split("/")[1].split("-")[0]
                   in ("rgba", "webp_alpha")]
    assert len(translucent) == 2 * len(image_fixtures.LABELS)
    for image in good:
        pixels = tf.io.decode_png(rows[image.key]["image"]).numpy().astype(int)
        expected = np.array(image.rgb)
        if image in translucent:
            expected = np.floor((expected * 77 + np.array([255, 128, 0]) * 178) / 255 + 0.5)
        assert np.abs(pixels - expected).max() <= (3 if image.lossy else 0), image.key
    with pytest.raises(ValueError, match="--alpha_background must be R,G,B"):
        run_images_job(root, str(tmp_path / "refused"), "--alpha_background=white")


def test_images_job_runs_ops_on_one_thread_each_unless_told_otherwise(monkeypatch):
    from pipelines import images

    monkeypatch.delenv(images.INTRA_OP_THREADS_ENV, raising=False)
    images.run_ops_on_one_thread_each()
    assert os.environ[images.INTRA_OP_THREADS_ENV] == "1"
    monkeypatch.setenv(images.INTRA_OP_THREADS_ENV, "0")  # The user's choice stays.
    images.run_ops_on_one_thread_each()
    assert os.environ[images.INTRA_OP_THREADS_ENV] == "0"


def test_images_job_is_byte_identical_with_any_number_of_threads_per_op(tmp_path):
    # TensorFlow reads the thread count when it starts, so each run is a process of
    # its own: 0 is TensorFlow's default (one thread per core), 1 the job's.
    from pipelines import images

    root = str(tmp_path / "photos")
    _photo_crops(root)
    digests = []
    for threads in ("0", "1", "3"):
        out = str(tmp_path / f"out{threads}")
        env = {**os.environ, images.INTRA_OP_THREADS_ENV: threads}
        result = subprocess.run(
            [sys.executable, "-m", "pipelines.images", f"--input={root}",
             f"--output_dir={out}", "--split_fractions=0.5,0.25,0.25"],
            env=env, capture_output=True, text=True, timeout=300)
        assert result.returncode == 0, result.stderr[-2000:]
        digests.append(output_digests(out))
    assert digests[0] == digests[1] == digests[2]
    assert any(path.endswith(".tfrecord.gz") for path in digests[0])
