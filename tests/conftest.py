"""Shared fixtures: generated image trees and one image-job run reused by many tests."""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import glob
import hashlib

import pytest

from reader import contract
from tests import image_fixtures

# Small images keep the DirectRunner tests fast; the code path is the same at 224.
TEST_IMAGE_SIZE = 16


def run_images_job(input_path: str, output_dir: str, *flags: str) -> dict:
    """Runs ``python -m pipelines.images`` in-process; returns the manifest."""
    from pipelines import images

    return images.run([f"--input={input_path}", f"--output_dir={output_dir}",
                       f"--image_size={TEST_IMAGE_SIZE}", *flags])


def output_digests(out: str) -> dict[str, str]:
    """sha256 of every shard, the manifest and the rejected-records file of a job's
    output: what "byte-identical output" compares."""
    paths = [*glob.glob(os.path.join(out, "*", "*" + contract.SHARD_SUFFIX)),
             os.path.join(out, contract.MANIFEST_FILENAME),
             os.path.join(out, contract.ERRORS_DIRNAME, contract.REJECTED_FILENAME)]
    digests = {}
    for path in sorted(paths):
        with open(path, "rb") as f:
            digests[os.path.relpath(path, out)] = hashlib.sha256(f.read()).hexdigest()
    return digests


def read_split(out: str, manifest: dict, split: str) -> dict[str, dict]:
    """Reads a split back with plain tf.data + parse_example; returns key → features."""
    import tensorflow as tf

    spec = contract.feature_spec_from_json(manifest["features"])
    files = [os.path.join(out, shard["path"]) for shard in manifest["splits"][split]["shards"]]
    if not files:
        return {}
    dataset = (tf.data.TFRecordDataset(files, compression_type="GZIP")
               .batch(64).map(lambda records: tf.io.parse_example(records, spec)))
    rows: dict[str, dict] = {}
    for batch in dataset.as_numpy_iterator():
        for i in range(len(batch["key"])):
            row = {name: values[i] for name, values in batch.items()}
            rows[row["key"].decode()] = row
    return rows


@pytest.fixture(scope="session")
def image_folder(tmp_path_factory: pytest.TempPathFactory):
    """An ImageFolder tree with every supported format plus known-bad files.

    Returns (root, good fixture images, {bad key: expected reason}).
    """
    root = str(tmp_path_factory.mktemp("image_folder"))
    good = image_fixtures.write_image_folder(root)
    bad = image_fixtures.write_bad_files(root)
    return root, good, bad


@pytest.fixture(scope="session")
def png_dataset(image_folder, tmp_path_factory: pytest.TempPathFactory):
    """The image job's output (lossless PNG storage) for ``image_folder``."""
    root, _, _ = image_folder
    out = str(tmp_path_factory.mktemp("png_dataset"))
    manifest = run_images_job(root, out, "--image_format=png")
    return out, manifest
