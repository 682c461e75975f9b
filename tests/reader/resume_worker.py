"""Runs one side of a resume test in its own process (tests/reader/tfdata/test_resume.py).

``python -m tests.reader.resume_worker iterator DATA_DIR RESTORES.json`` restores each
checkpoint listed in RESTORES.json (``[checkpoint, out.json, endless, batches]``
entries; ``batches`` null for the rest of the epoch) into a fresh ``make_dataset``
iterator and writes the keys of the batches that follow to ``out.json``.
``fit MODES FEEDS DATA_DIR CKPT_DIR OUT.npy`` trains a small model with
``reader.FitCheckpoint`` once for each feed and mode (both comma-separated lists,
each run afresh; ``FEED`` in CKPT_DIR and OUT and ``MODE`` in OUT are replaced by
each): MODE ``full`` without interruption, ``interrupted`` until global step
``INTERRUPT_AT`` (then raises), ``resume`` from the checkpoint; ``full`` and
``resume`` write the final weights. FEED ``endless``: ``num_epochs=None`` and
``steps_per_epoch``, for ``FIT_EPOCHS`` epochs; ``epochs``: ``num_epochs=1``, one
iterator per epoch, for ``EPOCH_FEED_EPOCHS`` epochs.
"""

from __future__ import annotations

import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np
import tensorflow as tf

import reader

ITERATOR_BATCH = 5
ITERATOR_SEED = 3
FIT_BATCH = 8
FIT_SEED = 5
FIT_EPOCHS = 3
# With per-epoch iterators the resumed run matches the uninterrupted one up to the end
# of the interrupted epoch (later epochs are shuffled anew): stop there.
EPOCH_FEED_EPOCHS = 2
SAVE_EVERY = 2
# Global step after which the interrupted run stops: between two saves.
INTERRUPT_AT = 12


def iterator_dataset(data_dir: str, endless: bool) -> tf.data.Dataset:
    return reader.make_dataset(data_dir, "train", ITERATOR_BATCH, seed=ITERATOR_SEED,
                               num_epochs=None if endless else 1, features=["key"])


def batch_keys(batch: tuple) -> list[str]:
    return [k.decode() for k in batch[0]["key"].numpy()]


def restore_and_read(data_dir: str, checkpoint: str, out: str, endless: bool,
                     num_batches: int | None) -> None:
    iterator = iter(iterator_dataset(data_dir, endless))
    tf.train.Checkpoint(iterator=iterator).read(checkpoint).assert_consumed()
    batches = []
    while num_batches is None or len(batches) < num_batches:
        try:
            batches.append(batch_keys(next(iterator)))
        except StopIteration:
            break
    with open(out, "w") as f:
        json.dump(batches, f)


class Interrupted(Exception):
    """Stands for the machine going away."""


class _InterruptAt(tf.keras.callbacks.Callback):
    def __init__(self, step: int) -> None:
        super().__init__()
        self.step, self.seen = step, 0

    def on_train_batch_end(self, batch: int, logs: dict | None = None) -> None:
        self.seen += 1
        if self.seen == self.step:
            raise Interrupted()


def small_model(image_size: int, num_classes: int) -> tf.keras.Model:
    model = tf.keras.Sequential([
        tf.keras.Input((image_size, image_size, 3)),
        tf.keras.layers.Conv2D(4, 3),
        tf.keras.layers.GlobalAveragePooling2D(),
        tf.keras.layers.Dense(num_classes),
    ])
    model.compile(optimizer=tf.keras.optimizers.Adam(0.05),
                  loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model


def fit(mode: str, feed: str, data_dir: str, checkpoint_dir: str, out: str) -> None:
    tf.keras.utils.set_random_seed(0)
    tf.config.experimental.enable_op_determinism()
    info = reader.open_dataset(data_dir)
    model = small_model(int(info.preprocessing["image_size"]), len(info.label_vocab))
    endless = feed == "endless"
    train = reader.make_dataset(data_dir, "train", FIT_BATCH, seed=FIT_SEED,
                                num_epochs=None if endless else 1)
    steps = reader.steps_per_epoch(data_dir, "train", FIT_BATCH) if endless else None
    callbacks: list[tf.keras.callbacks.Callback] = []
    initial_epoch = 0
    if mode != "full":
        resume = reader.FitCheckpoint(checkpoint_dir, save_every=SAVE_EVERY)
        initial_epoch = resume.initial_epoch
        callbacks.append(resume)
    if mode == "interrupted":
        callbacks.append(_InterruptAt(INTERRUPT_AT))
    try:
        model.fit(train, epochs=FIT_EPOCHS if endless else EPOCH_FEED_EPOCHS,
                  steps_per_epoch=steps,
                  initial_epoch=initial_epoch, callbacks=callbacks, verbose=0)
    except Interrupted:
        return
    np.save(out, np.concatenate([w.numpy().ravel() for w in model.weights]))


def main(argv: list[str]) -> None:
    if argv[0] == "iterator":
        with open(argv[2]) as f:
            restores = json.load(f)
        for checkpoint, out, endless, num_batches in restores:
            restore_and_read(argv[1], checkpoint, out, endless, num_batches)
    elif argv[0] == "fit":
        for feed in argv[2].split(","):
            for mode in argv[1].split(","):  # e.g. full,interrupted: one process, two runs
                fit(mode, feed, argv[3], argv[4].replace("FEED", feed),
                    argv[5].replace("FEED", feed).replace("MODE", mode))
    else:
        raise SystemExit(f"unknown command {argv[0]!r}")


if __name__ == "__main__":
    main(sys.argv[1:])
