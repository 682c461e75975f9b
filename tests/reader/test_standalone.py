"""The reader on its own: a copy of reader/ and TensorFlow, nothing else of the project."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from tests.reader.helpers import BASE_COLOURS, REPO_ROOT, manifest_keys

# Runs in a fresh interpreter whose working folder holds only the copy of reader/.
STANDALONE = """
import json, os, sys

BLOCKED = set(sys.argv[2].split(","))


class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ImportError(f"No module named {name!r} (blocked: TensorFlow-only test)")


sys.meta_path.insert(0, Block())
import reader
from reader import preview, verify

data_dir = sys.argv[1]
keys, colours = [], {}
dataset = reader.make_dataset(data_dir, "train", 8, seed=0, features=["key", "image"])
for features, labels in dataset.as_numpy_iterator():
    keys += [k.decode() for k in features["key"]]
    names = reader.label_vocabulary(data_dir)
    for image, label in zip(features["image"], labels):
        colours.setdefault(names[label], []).append((image[0, 0] * 255).round().tolist())
shown = preview.image_preview(data_dir, "train", n=4)
try:
    reader.transform_output(data_dir)
    serving_error = None
except ImportError as error:
    serving_error = str(error)
print(json.dumps({
    "reader_file": reader.make_dataset.__code__.co_filename,
    "keys": keys, "colours": colours, "captions": shown.captions,
    "verify_exit": verify.main([data_dir]), "serving_error": serving_error,
    "top_level_modules": sorted({m.split(".")[0] for m in sys.modules}),
}))
"""


BLOCKED = {"apache_beam", "tensorflow_transform", "tfx_bsl", "etl", "pipelines"}


@pytest.fixture(scope="module")
def standalone_report(image_dataset, tmp_path_factory) -> dict:
    """What STANDALONE printed, run from a copy of reader/ with the rest blocked."""
    root = tmp_path_factory.mktemp("standalone")
    shutil.copytree(os.path.join(REPO_ROOT, "reader"), root / "reader",
                    ignore=shutil.ignore_patterns("__pycache__", "build", "*.egg-info"))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    result = subprocess.run([sys.executable, "-c", STANDALONE, image_dataset,
                             ",".join(sorted(BLOCKED))],
                            cwd=root, env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    report["root"] = str(root)
    return report


def test_reader_alone_reads_a_dataset_with_tensorflow_only(image_dataset, standalone_report):
    report = standalone_report
    assert report["reader_file"].startswith(os.path.join(report["root"], "reader"))
    assert sorted(report["keys"]) == manifest_keys(image_dataset, "train")
    for name, colours in report["colours"].items():  # decoded pixels: the class colour
        assert all(max(abs(c - b) for c, b in zip(colour, BASE_COLOURS[name],
                                                  strict=True)) <= 26
                   for colour in colours), name
    assert len(report["captions"]) == 4 and report["verify_exit"] == 0
    assert not set(report["top_level_modules"]) & BLOCKED


def test_reader_alone_serving_helper_names_the_missing_package(standalone_report):
    assert standalone_report["serving_error"] == (
        "reader.transform_output needs tensorflow-transform, which a training install "
        "does not include: pip install 'tensorflow-transform>=1.21,<1.22'")
