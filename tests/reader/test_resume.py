"""Mid-epoch resume: iterator checkpoints restored in a new process, and Keras fit."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import numpy as np
import pytest
import tensorflow as tf

import reader
from reader import resume
from tests.reader import resume_worker
from tests.reader.test_pipeline import manifest_keys

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run_worker(*args: str, legacy_keras: bool = False) -> None:
    env = {k: v for k, v in os.environ.items() if k != "TF_USE_LEGACY_KERAS"}
    if legacy_keras:
        env["TF_USE_LEGACY_KERAS"] = "1"
    result = subprocess.run([sys.executable, "-m", "tests.reader.resume_worker", *args],
                            cwd=REPO_ROOT, env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-3000:]


def read_batches(iterator, count: int | None = None) -> list[list[str]]:
    batches = []
    for batch in iterator:
        batches.append(resume_worker.batch_keys(batch))
        if len(batches) == count:
            break
    return batches


def test_iterator_checkpoint_resumes_rest_of_epoch_in_new_process(image_dataset, tmp_path,
                                                                  fresh_global_seed):
    dataset = resume_worker.iterator_dataset(image_dataset, endless=False)
    iterator = iter(dataset)
    before = read_batches(iterator, 4)
    checkpoint = tf.train.Checkpoint(iterator=iterator).write(str(tmp_path / "it"))
    uninterrupted = before + read_batches(iterator)
    run_worker("iterator", image_dataset, checkpoint, str(tmp_path / "rest.json"))
    rest = json.loads((tmp_path / "rest.json").read_text())
    assert rest == uninterrupted[4:]  # Same batches, same order.
    seen = [k for batch in before + rest for k in batch]
    assert sorted(seen) == manifest_keys(image_dataset, "train")  # Each record once.


def test_iterator_checkpoint_resumes_endless_stream_across_epochs(image_dataset, tmp_path,
                                                                 fresh_global_seed):
    # The next epochs' shuffles draw from the restoring process's seed state: both
    # processes must have the same global seed (here none).
    records = reader.open_dataset(image_dataset).num_records("train")
    three_epochs = 3 * records // resume_worker.ITERATOR_BATCH
    iterator = iter(resume_worker.iterator_dataset(image_dataset, endless=True))
    read_batches(iterator, 7)
    checkpoint = tf.train.Checkpoint(iterator=iterator).write(str(tmp_path / "it"))
    uninterrupted = read_batches(iterator, three_epochs)
    run_worker("iterator", image_dataset, checkpoint, str(tmp_path / "rest.json"),
               "--endless", f"--batches={three_epochs}")
    assert json.loads((tmp_path / "rest.json").read_text()) == uninterrupted


def test_symbolic_checkpoint_holds_no_decoded_batch(image_dataset, tmp_path):
    dataset = reader.make_dataset(image_dataset, "train", 8, shuffle=False)
    iterator = iter(dataset)
    next(iterator)
    time.sleep(1.0)  # Let the parallel map and the prefetch buffer fill up.
    path = tf.train.Checkpoint(iterator=iterator).write(str(tmp_path / "it"))
    size = int(reader.open_dataset(image_dataset).preprocessing["image_size"])
    one_batch = 8 * size * size * 3 * 4  # float32 images
    assert resume.checkpoint_size(path) < one_batch


def test_read_config_symbolic_checkpoint_true_names_what_prevents_it(image_dataset):
    config = reader.ReadConfig(symbolic_checkpoint=True)
    with pytest.raises(ValueError, match="cache"):
        reader.make_dataset(image_dataset, cache="memory", read_config=config)


def resume_like_uninterrupted(data_dir: str, tmp_path, feed: str,
                              legacy_keras: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Final weights of an uninterrupted run and of an interrupted, resumed one."""
    checkpoints = str(tmp_path / "ckpt")
    out = str(tmp_path / "MODE.npy")
    run_worker("fit", "full,interrupted", feed, data_dir, checkpoints, out,
               legacy_keras=legacy_keras)
    run_worker("fit", "resume", feed, data_dir, checkpoints, out, legacy_keras=legacy_keras)
    return np.load(tmp_path / "full.npy"), np.load(tmp_path / "resume.npy")


# Keras 3 is what TensorFlow 2.21 gives; tf_keras (Keras 2) is what a process gets once
# tensorflow_transform is imported (it sets TF_USE_LEGACY_KERAS=1).
@pytest.mark.parametrize("legacy_keras", [False, True], ids=["keras3", "tf_keras"])
def test_fit_checkpoint_resumed_endless_run_trains_like_uninterrupted_run(
        image_dataset, tmp_path, legacy_keras):
    full, resumed = resume_like_uninterrupted(image_dataset, tmp_path, "endless",
                                              legacy_keras)
    # Same batches in the same order, same optimizer state: the same weights, bit for bit.
    assert np.array_equal(full, resumed)


def test_fit_checkpoint_resumed_epoch_trains_like_uninterrupted_epoch(image_dataset,
                                                                      tmp_path):
    # The interruption falls in the last epoch, which the resume completes exactly.
    steps = reader.steps_per_epoch(image_dataset, "train", resume_worker.FIT_BATCH)
    assert steps < resume_worker.INTERRUPT_AT < 2 * steps
    full, resumed = resume_like_uninterrupted(image_dataset, tmp_path, "epochs")
    assert np.array_equal(full, resumed)


def test_fit_checkpoint_refuses_fit_starting_in_another_epoch(image_dataset, tmp_path):
    checkpoints = str(tmp_path / "ckpt")
    run_worker("fit", "interrupted", "endless", image_dataset, checkpoints, "unused")
    steps = reader.steps_per_epoch(image_dataset, "train", resume_worker.FIT_BATCH)
    saved_step = resume_worker.INTERRUPT_AT - 1  # The last save before the interruption.
    callback = reader.FitCheckpoint(checkpoints)
    assert callback.initial_epoch == saved_step // steps == 1
    model = resume_worker.small_model(16, 3)
    train = reader.make_dataset(image_dataset, "train", resume_worker.FIT_BATCH, seed=0,
                                num_epochs=None)
    with pytest.raises(ValueError, match="initial_epoch"):
        model.fit(train, epochs=3, steps_per_epoch=steps, callbacks=[callback], verbose=0)
