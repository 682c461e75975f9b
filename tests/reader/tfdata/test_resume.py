"""Mid-epoch resume: iterator checkpoints restored in a new process, and Keras fit.

Each side of a resume runs in a process of its own (``resume_worker``); the module
fixtures start as few of them as possible and the tests compare what they wrote.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time

import numpy as np
import pytest
import tensorflow as tf

import reader
from reader.tfdata import resume
from tests.reader import resume_worker
from tests.reader.helpers import REPO_ROOT, manifest_keys


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


@pytest.fixture(scope="module")
def iterator_restores(image_dataset, tmp_path_factory):
    """Two iterators checkpointed here and restored in one new process: one in the
    4th batch of a single epoch, one in the 8th batch of an endless stream, read on
    for three epochs. {name: (batches read before the checkpoint, batches this
    process read after it, batches the new process read after it)}."""
    base = tmp_path_factory.mktemp("iterator_restores")
    records = reader.open_dataset(image_dataset).num_records("train")
    three_epochs = 3 * records // resume_worker.ITERATOR_BATCH
    cases = {"epoch": (False, 4, None), "endless": (True, 7, three_epochs)}
    uninterrupted, restores = {}, []
    for name, (endless, before_count, after_count) in cases.items():
        # The next epochs' shuffles draw from the restoring process's seed state: both
        # processes must have the same global seed (here none).
        tf.random.set_seed(None)
        iterator = iter(resume_worker.iterator_dataset(image_dataset, endless=endless))
        before = read_batches(iterator, before_count)
        checkpoint = tf.train.Checkpoint(iterator=iterator).write(str(base / name / "it"))
        uninterrupted[name] = before, read_batches(iterator, after_count)
        restores.append([checkpoint, str(base / f"{name}.json"), endless, after_count])
    with open(base / "restores.json", "w") as f:
        json.dump(restores, f)
    run_worker("iterator", image_dataset, str(base / "restores.json"))
    return {name: (*uninterrupted[name], json.loads((base / f"{name}.json").read_text()))
            for name in cases}


def test_iterator_checkpoint_resumes_rest_of_epoch_in_new_process(iterator_restores):
    _, after, restored = iterator_restores["epoch"]
    assert restored == after  # Same batches, same order.


def test_iterator_checkpoint_restored_epoch_reads_each_record_once(image_dataset,
                                                                   iterator_restores):
    before, _, restored = iterator_restores["epoch"]
    seen = [k for batch in before + restored for k in batch]
    assert sorted(seen) == manifest_keys(image_dataset, "train")


def test_iterator_checkpoint_resumes_endless_stream_across_epochs(iterator_restores):
    _, after, restored = iterator_restores["endless"]
    assert restored == after


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


# Keras 3 is what TensorFlow 2.21 gives; tf_keras (Keras 2) is what a process gets once
# tensorflow_transform is imported (it sets TF_USE_LEGACY_KERAS=1).
KERAS_FEEDS = {"keras3": "endless,epochs", "tf_keras": "endless"}


@pytest.fixture(scope="module")
def fit_runs(image_dataset, tmp_path_factory):
    """For a Keras flavour, final weights of uninterrupted and of interrupted-then-
    resumed runs per feed, and a copy of the endless feed's checkpoints as the
    interruption left them: run(flavour) → ({feed: (full, resumed)}, checkpoint dir)."""
    done: dict[str, tuple[dict[str, tuple[np.ndarray, np.ndarray]], str]] = {}

    def run(flavour: str):
        if flavour not in done:
            base = tmp_path_factory.mktemp(f"fit_{flavour}")
            feeds, legacy = KERAS_FEEDS[flavour], flavour == "tf_keras"
            checkpoints, out = str(base / "ckpt-FEED"), str(base / "FEED-MODE.npy")
            run_worker("fit", "full,interrupted", feeds, image_dataset, checkpoints, out,
                       legacy_keras=legacy)
            interrupted = str(base / "interrupted")
            shutil.copytree(str(base / "ckpt-endless"), interrupted)
            run_worker("fit", "resume", feeds, image_dataset, checkpoints, out,
                       legacy_keras=legacy)
            weights = {feed: (np.load(base / f"{feed}-full.npy"),
                              np.load(base / f"{feed}-resume.npy"))
                       for feed in feeds.split(",")}
            done[flavour] = weights, interrupted
        return done[flavour]

    return run


@pytest.mark.parametrize("flavour", ["keras3", "tf_keras"])
def test_fit_checkpoint_resumed_endless_run_trains_like_uninterrupted_run(fit_runs,
                                                                          flavour):
    full, resumed = fit_runs(flavour)[0]["endless"]
    # Same batches in the same order, same optimizer state: the same weights, bit for bit.
    assert np.array_equal(full, resumed)


def test_fit_checkpoint_interruption_falls_in_the_last_epoch_feed(image_dataset):
    steps = reader.steps_per_epoch(image_dataset, "train", resume_worker.FIT_BATCH)
    assert steps < resume_worker.INTERRUPT_AT < resume_worker.EPOCH_FEED_EPOCHS * steps


def test_fit_checkpoint_resumed_epoch_trains_like_uninterrupted_epoch(fit_runs):
    # The interruption falls in the last epoch, which the resume completes exactly.
    full, resumed = fit_runs("keras3")[0]["epochs"]
    assert np.array_equal(full, resumed)


def test_fit_checkpoint_resumes_in_the_interrupted_epoch(image_dataset, fit_runs):
    steps = reader.steps_per_epoch(image_dataset, "train", resume_worker.FIT_BATCH)
    saved_step = resume_worker.INTERRUPT_AT - 1  # The last save before the interruption.
    callback = reader.FitCheckpoint(fit_runs("keras3")[1])
    assert callback.initial_epoch == saved_step // steps == 1


def test_fit_checkpoint_refuses_fit_starting_in_another_epoch(image_dataset, fit_runs,
                                                              tmp_path):
    checkpoints = str(tmp_path / "ckpt")
    shutil.copytree(fit_runs("keras3")[1], checkpoints)
    steps = reader.steps_per_epoch(image_dataset, "train", resume_worker.FIT_BATCH)
    model = resume_worker.small_model(16, 3)
    train = reader.make_dataset(image_dataset, "train", resume_worker.FIT_BATCH, seed=0,
                                num_epochs=None)
    with pytest.raises(ValueError, match="initial_epoch"):
        model.fit(train, epochs=3, steps_per_epoch=steps,
                  callbacks=[reader.FitCheckpoint(checkpoints)], verbose=0)
