"""A small imbalanced image dataset built once by the real image job."""

from __future__ import annotations

import json
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


@pytest.fixture()
def fresh_global_seed():
    """No TensorFlow global seed, as in a new process: tf.data combines an op's seed
    with the global one, which tests that call Keras's set_random_seed leave set."""
    tf.random.set_seed(None)


@pytest.fixture(scope="session")
def image_dataset(tmp_path_factory: pytest.TempPathFactory) -> str:
    """Directory of a finished PNG image dataset with 4 shards per split."""
    root = str(tmp_path_factory.mktemp("reader_input"))
    write_coloured_images(root)
    out = str(tmp_path_factory.mktemp("reader_dataset"))
    run_images_job(root, out, "--image_format=png", f"--num_shards={NUM_SHARDS}")
    return out


def write_jsonl(path: str, rows: list[dict]) -> str:
    with open(path, "w") as f:
        f.writelines(json.dumps(row) + "\n" for row in rows)
    return path


# Forecast fixture: series "ramp" holds value t at timestamp t, so a de-normalised
# window starting at timestamp t is exactly [t, t+1, ...].
RAMP_LENGTH = 80
FORECAST_WINDOW = 6
FORECAST_HORIZON = 2


@pytest.fixture(scope="session")
def forecast_dataset(tmp_path_factory: pytest.TempPathFactory) -> str:
    from pipelines import timeseries

    root = tmp_path_factory.mktemp("forecast")
    rows = [{"series_id": "ramp", "timestamp": t, "value": float(t)}
            for t in range(RAMP_LENGTH)]
    path = write_jsonl(str(root / "rows.jsonl"), rows)
    out = str(root / "out")
    timeseries.run([f"--input={path}", f"--output_dir={out}",
                    f"--window_size={FORECAST_WINDOW}", f"--horizon={FORECAST_HORIZON}"])
    return out


# Classification fixture: rising series are "up", falling ones "down".
LABELLED_SERIES = 12
LABELLED_WINDOW = 5


def series_label(series_id: str) -> str:
    return "down" if int(series_id[1:]) % 3 == 0 else "up"


@pytest.fixture(scope="session")
def labelled_series_dataset(tmp_path_factory: pytest.TempPathFactory) -> str:
    from pipelines import timeseries

    root = tmp_path_factory.mktemp("labelled")
    rows, labels = [], []
    for i in range(LABELLED_SERIES):
        series_id = f"s{i:02d}"
        slope = 1.0 if series_label(series_id) == "up" else -1.0
        rows += [{"series_id": series_id, "timestamp": t, "value": slope * t}
                 for t in range(20)]
        labels.append({"series_id": series_id, "label": series_label(series_id)})
    path = write_jsonl(str(root / "rows.jsonl"), rows)
    labels_path = write_jsonl(str(root / "labels.jsonl"), labels)
    out = str(root / "out")
    timeseries.run([f"--input={path}", f"--output_dir={out}",
                    f"--series_labels={labels_path}", f"--window_size={LABELLED_WINDOW}",
                    "--shift=5"])
    return out
