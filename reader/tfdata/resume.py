"""Mid-epoch resume for Keras ``fit``: checkpoint the model with fit's input iterator.

A tf.data iterator is checkpointable: ``tf.train.Checkpoint(iterator=it)`` saves
where it is (and, unless saved symbolically, what its buffers hold), and restoring it
into an iterator of the same pipeline continues with exactly the elements that were
still to come, in the same order, when the pipeline is deterministic
(``make_dataset(..., seed=...)``). Keras builds its input iterator inside ``fit``;
``FitCheckpoint`` reaches it through the one place Keras hands it out, the
``train_function(iterator)`` it calls every step, and saves it with the model and
the optimizer.
"""

from __future__ import annotations

from typing import Any

import tensorflow as tf


class FitCheckpoint(tf.keras.callbacks.Callback):
    """Saves model, optimizer and input position every ``save_every`` steps; resumes.

    Example::

        train = reader.make_dataset(data_dir, "train", 64, seed=0)
        resume = reader.FitCheckpoint("gs://bucket/run1/checkpoints", save_every=200)
        model.fit(train, epochs=10, initial_epoch=resume.initial_epoch,
                  callbacks=[resume])

    Run the same script again after an interruption: the model, the optimizer and
    the input come back as of the last save; the steps of the interrupted epoch that
    were already trained on are passed over without reading data, and training goes
    on with the batch that came next. Two ways to feed ``fit``:

    * ``make_dataset(..., num_epochs=1)`` (strict epochs; Keras makes a new iterator
      each epoch): the interrupted epoch goes on exactly as it would have; the epochs
      after it are shuffled anew but not in the uninterrupted run's order
      (TensorFlow does not checkpoint the seed each new iterator draws,
      tensorflow#48178). The iterator is saved symbolically: small checkpoints.
    * ``make_dataset(..., num_epochs=None)`` with ``fit(steps_per_epoch=...)``: one
      iterator for the whole run, so every batch after the resume is the one the
      uninterrupted run would have had. tf.data 2.21 cannot restore a repeated stream
      symbolically, so its buffers are saved in full: larger checkpoints.

    Pass the same ``seed`` and set the same TensorFlow global seed (e.g.
    ``tf.keras.utils.set_random_seed``) both times: tf.data combines the two. Keras's
    metrics restart at the resumed step, so the resumed epoch's logged averages cover
    only the steps after it.

    Args:
        directory: where checkpoints go (local or any ``tf.io.gfile`` path).
        save_every: steps between saves; every epoch's end is saved too.
        max_to_keep: checkpoints kept; older ones are deleted.
    """

    def __init__(self, directory: str, save_every: int = 100, max_to_keep: int = 2
                 ) -> None:
        super().__init__()
        if save_every < 1:
            raise ValueError(f"save_every must be >= 1, got {save_every}.")
        self.directory = directory
        self.save_every = save_every
        self.max_to_keep = max_to_keep
        # Where training stood at the save: epoch, steps done in it, steps done in all.
        self._epoch = tf.Variable(0, dtype=tf.int64, trainable=False)
        self._step_in_epoch = tf.Variable(0, dtype=tf.int64, trainable=False)
        self._global_step = tf.Variable(0, dtype=tf.int64, trainable=False)
        self._latest = tf.train.latest_checkpoint(directory)
        self._initial = (0, 0) if self._latest is None else (
            _load_int(self._latest, "epoch"), _load_int(self._latest, "step_in_epoch"))
        self._checkpoint: tf.train.Checkpoint | None = None
        self._manager: tf.train.CheckpointManager | None = None
        self._one_iterator = False
        self._iterator: Any = None
        self._inner_train_function: Any = None
        self._skip_until = 0
        self._current_step = 0
        self._steps_since_save = 0

    @property
    def initial_epoch(self) -> int:
        """The epoch to resume in (0 without a checkpoint): ``fit(initial_epoch=...)``."""
        return self._initial[0]

    @property
    def resumed_from(self) -> str | None:
        """Path of the checkpoint this run resumes from, or None."""
        return self._latest

    def on_train_begin(self, logs: dict | None = None) -> None:
        model = self.model
        optimizer = model.optimizer
        # Slots must exist before they are restored (Keras 3: `built`; tf_keras's
        # optimizer keeps the flag private).
        if optimizer is not None and not getattr(optimizer, "built",
                                                 getattr(optimizer, "_built", True)):
            optimizer.build(model.trainable_variables)
        state = {"model": model, "optimizer": optimizer, "epoch": self._epoch,
                 "step_in_epoch": self._step_in_epoch, "global_step": self._global_step}
        if self._latest is not None:
            # A checkpoint object of its own: the saved iterator must not be restored
            # on its own when one is attached (it is restored below, when wanted).
            tf.train.Checkpoint(**state).read(self._latest).expect_partial()
            self._skip_until = self._initial[1]
        self._checkpoint = tf.train.Checkpoint(**state)
        self._manager = tf.train.CheckpointManager(self._checkpoint, self.directory,
                                                   max_to_keep=self.max_to_keep)
        self._inner_train_function = model.train_function
        model.train_function = self._train_function

    def _train_function(self, iterator: Any) -> Any:
        if iterator is not self._iterator:
            self._attach(iterator)
        if self._current_step < self._skip_until:
            # Trained on before the interruption: its data is already consumed.
            return {}
        return self._inner_train_function(iterator)

    def _attach(self, iterator: Any) -> None:
        first = self._iterator is None
        if first:
            self._one_iterator = _keeps_one_iterator(self.params.get("steps"), iterator)
        elif self._one_iterator:
            raise RuntimeError(
                "Keras made a second input iterator although steps_per_epoch was "
                "given: the dataset ran out. With steps_per_epoch, feed an endless "
                "dataset (make_dataset(..., num_epochs=None)).")
        self._iterator = iterator
        self._checkpoint.iterator = iterator
        # An epoch-end save of per-epoch iterators holds a spent iterator: the new
        # epoch starts from a fresh one.
        mid_stream = self._one_iterator or self._initial[1] > 0
        if first and self._latest is not None and mid_stream:
            tf.train.Checkpoint(iterator=iterator).read(self._latest).expect_partial()

    def on_epoch_begin(self, epoch: int, logs: dict | None = None) -> None:
        if self._latest is not None and self._iterator is None and epoch != self._initial[0]:
            raise ValueError(f"The checkpoint {self._latest!r} resumes in epoch "
                             f"{self._initial[0]}, but fit starts at epoch {epoch}: pass "
                             f"initial_epoch=callback.initial_epoch to fit.")
        self._epoch.assign(epoch)

    def on_train_batch_begin(self, batch: int, logs: dict | None = None) -> None:
        self._current_step = batch

    def on_train_batch_end(self, batch: int, logs: dict | None = None) -> None:
        done = batch + 1  # Steps of this epoch trained so far.
        if done <= self._skip_until:
            return
        self._skip_until = 0
        steps = done - int(self._step_in_epoch)
        self._step_in_epoch.assign(done)
        self._global_step.assign_add(steps)
        self._steps_since_save += steps
        if self._steps_since_save >= self.save_every:
            self._save()

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        self._epoch.assign(epoch + 1)
        self._step_in_epoch.assign(0)
        self._save()

    def on_train_end(self, logs: dict | None = None) -> None:
        if self._inner_train_function is not None:
            self.model.train_function = self._inner_train_function
        self._inner_train_function = None
        self._iterator = None

    def _save(self) -> None:
        self._steps_since_save = 0
        self._manager.save(checkpoint_number=int(self._global_step))


def _keeps_one_iterator(steps: int | None, iterator: Any) -> bool:
    """Whether Keras feeds every epoch of this ``fit`` from ``iterator``.

    Keras 3 and tf_keras make a new iterator per epoch when ``fit`` has no
    ``steps_per_epoch`` or the dataset's length equals it (``make_dataset``'s finite
    datasets have a known length, which Keras then reports as the steps); they keep
    one across epochs when ``steps_per_epoch`` is given for an endless or unknown-
    length dataset. The dataset is the iterator's own (a ``tf.data`` iterator keeps
    it); without one, given steps mean one iterator.
    """
    if not steps:
        return False
    dataset = getattr(iterator, "_dataset", None)
    if dataset is None:
        return True
    return int(dataset.cardinality()) != steps


def _load_int(checkpoint: str, name: str) -> int:
    return int(tf.train.load_variable(checkpoint, f"{name}/.ATTRIBUTES/VARIABLE_VALUE"))


def checkpoint_size(path: str) -> int:
    """Bytes of the checkpoint ``path`` (its index and data files)."""
    return sum(tf.io.gfile.stat(p).length for p in tf.io.gfile.glob(path + ".*"))
