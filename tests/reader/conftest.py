"""A small imbalanced image dataset built once by the real image job."""

from __future__ import annotations

import os

import numpy as np
import pytest
import tensorflow as tf

from tests.conftest import run_images_job

# Class → number of images; imbalanced on purpose (balance tests).
CLASS_SIZES = {"red": 48, "green": 24, "blue": 12}
BASE_COLOURS = {"red": (200, 30, 30), "green": (30, 200, 30), "blue": (30, 30, 200)}
NUM_SHARDS = 4


def write_coloured_images(root: str) -> int:
    """Solid images whose colour tells the class (learnable by a tiny model)."""
    rng = np.random.default_rng(0)
    total = 0
    for label, count in CLASS_SIZES.items():
        os.makedirs(os.path.join(root, label), exist_ok=True)
        for i in range(count):
            rgb = np.clip(np.array(BASE_COLOURS[label]) + rng.integers(-25, 26, 3), 0, 255)
            image = np.broadcast_to(rgb.astype(np.uint8), (20, 24, 3))
            tf.io.write_file(os.path.join(root, label, f"{i:03d}.png"),
                             tf.io.encode_png(image))
            total += 1
    return total


@pytest.fixture(scope="session")
def image_dataset(tmp_path_factory: pytest.TempPathFactory) -> str:
    """Directory of a finished PNG image dataset with 4 shards per split."""
    root = str(tmp_path_factory.mktemp("reader_input"))
    write_coloured_images(root)
    out = str(tmp_path_factory.mktemp("reader_dataset"))
    run_images_job(root, out, "--image_format=png", f"--num_shards={NUM_SHARDS}")
    return out
