"""Datasets built once by the real jobs (a small imbalanced image dataset and two
time-series datasets), and image datasets with multi-label sets, numeric targets and
carried columns written directly in the on-disk format (tests/reader/label_fixtures.py)."""

from __future__ import annotations

import shutil

import pytest
import tensorflow as tf

from tests.job_runs import run_images_job
from tests.reader.helpers import (
    FORECAST_HORIZON,
    FORECAST_WINDOW,
    LABELLED_SERIES,
    LABELLED_WINDOW,
    NUM_SHARDS,
    RAMP_LENGTH,
    series_label,
    write_coloured_images,
    write_jsonl,
)
from tests.reader.label_fixtures import CARRIED_COLUMNS, make_rows, write_dataset


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


@pytest.fixture()
def dataset_copy(image_dataset, tmp_path) -> str:
    """A copy of ``image_dataset`` that a test may damage."""
    copy = str(tmp_path / "copy")
    shutil.copytree(image_dataset, copy)
    return copy


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


def _labelled(factory: pytest.TempPathFactory, name: str, task: str, **kwargs) -> str:
    out = str(factory.mktemp(name))
    write_dataset(out, make_rows(), task, **kwargs)
    return out


@pytest.fixture(scope="session")
def multi_label_dataset(tmp_path_factory: pytest.TempPathFactory) -> str:
    """Tag sets (some empty, some with a class not in train), carried columns."""
    return _labelled(tmp_path_factory, "multi_label", "multi_label",
                     carried=tuple(CARRIED_COLUMNS))


@pytest.fixture(scope="session")
def regression_dataset(tmp_path_factory: pytest.TempPathFactory) -> str:
    """Two z-scored targets, no class."""
    return _labelled(tmp_path_factory, "regression", "regression", num_targets=2)


@pytest.fixture(scope="session")
def class_targets_dataset(tmp_path_factory: pytest.TempPathFactory) -> str:
    """One class per image and one target stored as given."""
    return _labelled(tmp_path_factory, "class_targets", "classification", num_targets=1,
                     normalize="none")


@pytest.fixture(scope="session")
def multi_label_targets_dataset(tmp_path_factory: pytest.TempPathFactory) -> str:
    """Tag sets and two z-scored targets."""
    return _labelled(tmp_path_factory, "multi_label_targets", "multi_label",
                     num_targets=2)
