"""tf.Transform preprocessing for time-series windows: z-score normalisation, labels.

The analysis never sees a window. The series step sums every train row of a series
once, exactly (``etl/core/transform/exact_stats.py``), and hands tf.Transform one small instance
per series with train rows: those moments (``TRAIN_MOMENTS_KEY``, serialized), the
series id and, with labels, the label and its number of train windows
(``TRAIN_WINDOWS_KEY``, the vocabulary's weight). The analyzers merge them into the
train mean and standard deviation, globally (``etl/core/transform/zscore.py``) or per series.
The same graph then normalises every split's windows and targets in the shard step,
and, at serving time, raw windows (the analysis-only features are not needed there).
``DescribeNormalisation`` merges the same instances' moments beside the analysis into
the manifest's ``normalisation`` entry: the global statistics the graph applies.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import apache_beam as beam
import numpy as np
import tensorflow as tf

from etl.core.transform import class_vocabulary, exact_stats, zscore
from etl.timeseries import calendar, categories, per_series
from etl.timeseries.roles import ColumnRoles
from etl.timeseries.window_examples import WindowSchema
from reader.format import contract


@dataclasses.dataclass(frozen=True)
class SeriesPreprocessing:
    """What the transform needs to know about the windows. ``num_features`` counts
    every real column (``roles.reals``); ``roles`` None or not ``given``: the
    single-role layout, every column in ``window`` and ``target``."""

    window_size: int
    horizon: int
    num_features: int
    classification: bool
    per_series: bool = False
    roles: ColumnRoles | None = None
    # How series labels are numbered (--class_order): sorted names or train windows.
    class_order: str = contract.CLASS_ORDER_NAME

    def __post_init__(self) -> None:
        if self.class_order not in contract.CLASS_ORDERS:
            raise ValueError(f"--class_order must be one of {', '.join(contract.CLASS_ORDERS)}"
                             f", got {self.class_order!r}.")
        if self.classification and self.horizon:
            raise ValueError("With --labels the target is the series label: use "
                             "--horizon=0.")
        if not self.classification and self.horizon < 1:
            raise ValueError("Forecasting needs --horizon >= 1 (or give --labels to "
                             "classify whole series).")
        if self.covariates and self.classification:
            raise ValueError("Column roles (--target_columns, --past_columns, "
                             "--known_columns, --static_real_columns, "
                             "--known_categorical_columns, --static_categorical_columns, "
                             "--calendar_features, --target_transform) are for "
                             "forecasting; --labels classifies whole series.")

    @property
    def covariates(self) -> bool:
        """Whether the covariate layout (known, static_real, target_scale) is written."""
        return self.roles is not None and self.roles.given

    def raw_shapes(self) -> dict[str, list[int]]:
        """Raw (serving) shape of each block (dtypes: ``raw_dtype``)."""
        if not self.covariates:
            shapes = {contract.WINDOW_KEY: [self.window_size, self.num_features]}
            if not self.classification:
                shapes[contract.TARGET_KEY] = [self.horizon, self.num_features]
            return shapes
        roles, steps = self.roles, self.window_size + self.horizon
        shapes = {contract.WINDOW_KEY: [self.window_size, roles.num_window_columns],
                  contract.TARGET_KEY: [self.horizon, len(roles.targets)]}
        if roles.known:
            shapes[contract.KNOWN_KEY] = [steps, len(roles.known)]
        if roles.calendar:
            shapes[contract.RAW_TIME_KEY] = [steps]
        if roles.known_categorical:
            shapes[contract.KNOWN_CAT_KEY] = [steps, len(roles.known_categorical)]
        if roles.static_categorical:
            shapes[contract.STATIC_CAT_KEY] = [len(roles.static_categorical)]
        if roles.static_real:
            shapes[contract.STATIC_REAL_KEY] = [len(roles.static_real)]
        return shapes

    def stored_shapes(self) -> dict[str, list[int]]:
        """Shape of each stored block of the covariate layout (int64 ids: ``ID_BLOCKS``,
        the others float32), in the order of ``roles.channels()`` (a block whose
        role has no column is absent)."""
        roles, steps = self.roles, self.window_size + self.horizon
        shapes = {contract.WINDOW_KEY: [self.window_size, roles.num_window_columns],
                  contract.TARGET_KEY: [self.horizon, len(roles.targets)],
                  contract.KNOWN_KEY: [steps, roles.num_known_channels],
                  contract.KNOWN_CAT_KEY: [steps, len(roles.known_categorical)],
                  contract.STATIC_CAT_KEY: [len(roles.static_categorical)],
                  contract.STATIC_REAL_KEY: [len(roles.static_real)],
                  contract.TARGET_SCALE_KEY: [len(roles.targets), 2]}
        return {name: shapes[name] for name in roles.channels()}

    def describe_roles(self) -> dict[str, Any]:
        """The manifest's ``column_roles`` entry (covariate layout only, else empty):
        the columns by role, the target transform, and every stored block's shape and
        channels in order."""
        if not self.covariates:
            return {}
        roles, shapes = self.roles, self.stored_shapes()
        return {"column_roles": {
            "targets": list(roles.targets), "past": list(roles.past),
            "known": list(roles.known), "static_real": list(roles.static_real),
            "known_categorical": list(roles.known_categorical),
            "static_categorical": list(roles.static_categorical),
            "vocabularies": dict(roles.vocabularies()),
            "calendar_features": list(roles.calendar),
            "target_transform": roles.target_transform,
            "statistics_columns": list(roles.reals),
            "blocks": {name: {"shape": shapes[name], "channels": channels}
                       for name, channels in roles.channels().items()},
        }}

    def window_schema(self) -> WindowSchema:
        """The stored example's layout."""
        if not self.covariates:
            return WindowSchema(self.window_size, self.horizon, self.num_features,
                                self.classification)
        roles = self.roles
        # window and target are the schema's own fields; the other blocks, flattened.
        blocks = [(name, int(np.prod(shape))) for name, shape in self.stored_shapes().items()
                  if name not in (contract.WINDOW_KEY, contract.TARGET_KEY)]
        return WindowSchema(self.window_size, self.horizon, roles.num_window_columns,
                            False, len(roles.targets),
                            tuple(b for b in blocks if b[0] not in ID_BLOCKS),
                            tuple(b for b in blocks if b[0] in ID_BLOCKS))

    def serving_feature_spec(self) -> dict[str, tf.io.FixedLenFeature]:
        """Spec of a raw window: what the shard step and serving feed ``transform_fn``."""
        spec = {key: tf.io.FixedLenFeature(shape, raw_dtype(key))
                for key, shape in self.raw_shapes().items()}
        spec.update({
            contract.SERIES_ID_KEY: tf.io.FixedLenFeature([], tf.string),
            contract.WINDOW_START_KEY: tf.io.FixedLenFeature([], tf.string),
            contract.SOURCE_KEY: tf.io.FixedLenFeature([], tf.string),
        })
        if self.classification:
            spec[contract.LABEL_NAME_KEY] = tf.io.FixedLenFeature([], tf.string)
        return spec

    def raw_feature_spec(self) -> dict[str, tf.io.FixedLenFeature]:
        """The serving spec plus the analysis-only features."""
        spec = {**self.serving_feature_spec(),
                TRAIN_MOMENTS_KEY: tf.io.FixedLenFeature([], tf.string),
                **categories.analysis_feature_spec(self.roles if self.covariates else None)}
        if self.classification:
            spec[TRAIN_WINDOWS_KEY] = tf.io.FixedLenFeature([], tf.int64)
        return spec


# The stored blocks of vocabulary ids (int64); the other blocks are float32.
ID_BLOCKS = (contract.KNOWN_CAT_KEY, contract.STATIC_CAT_KEY)


def raw_dtype(key: str) -> tf.DType:
    """The dtype of a raw (serving) block: int64 seconds, category texts, or reals."""
    if key == contract.RAW_TIME_KEY:
        return tf.int64
    return tf.string if key in ID_BLOCKS else tf.float32


# Raw features only the analysis reads: one instance per series with train rows
# (and etl/timeseries/categories.py's, per categorical column).
TRAIN_MOMENTS_KEY = "train_moments"
TRAIN_WINDOWS_KEY = "train_windows"


def analysis_instance(series_id: str, moments: exact_stats.Moments, label: str | None,
                      train_windows: int,
                      category_counts: Sequence[tuple[list[str], list[int]]] = (),
                      roles: ColumnRoles | None = None, steps: int = 0
                      ) -> dict[str, Any]:
    """The one instance the analysis sees for a series with train rows;
    ``category_counts``: per categorical column of ``roles``, its train texts and
    row counts (``steps``: W + H)."""
    instance: dict[str, Any] = {TRAIN_MOMENTS_KEY: moments.to_bytes(),
                                contract.SERIES_ID_KEY: series_id}
    if category_counts:
        instance.update(categories.analysis_features(category_counts, roles, steps))
    if label is not None:
        instance[contract.LABEL_NAME_KEY] = label
        instance[TRAIN_WINDOWS_KEY] = train_windows
    return instance


def preprocessing_fn(inputs: dict[str, tf.Tensor], *, config: SeriesPreprocessing
                     ) -> dict[str, tf.Tensor]:
    """Normalises ``window`` (and the forecast ``target``) by train statistics.

    ``z = (x - mean) / std`` per value column (``std`` is the population standard
    deviation; a constant column gets ``std = 1``). With ``per_series`` the
    statistics are those of the instance's own series. They come from tf.Transform
    analyzers (``ptransform_analyzer``) over the per-series exact moments
    (``TRAIN_MOMENTS_KEY``), so they do not depend on how Beam batches the data.
    With column roles (``config.covariates``) the moments span every real column
    (``roles.reals``, targets after the target transform) and the outputs are the
    covariate blocks (``_covariate_blocks``: window, target, known, static_real,
    target_scale; known_cat and static_cat ids from train-only vocabularies).
    """
    moments = inputs[TRAIN_MOMENTS_KEY]
    mean, std = zscore.exact_mean_and_std(moments, config.num_features)
    window = inputs[contract.WINDOW_KEY]  # [batch, W, F]
    series_ids = inputs[contract.SERIES_ID_KEY]
    if config.per_series:
        global_stats = mean, std
        mean, std = per_series.per_series_stats(moments, series_ids, config.num_features, mean, std)
        if config.covariates:  # Static reals are scaled globally (per series: all 0).
            mean, std = (_global_statics(m, g, config.roles)
                         for m, g in zip((mean, std), global_stats, strict=True))
        mean, std = mean[:, None, :], std[:, None, :]
    outputs = {
        contract.SERIES_ID_KEY: tf.identity(series_ids),
        contract.WINDOW_START_KEY: tf.identity(inputs[contract.WINDOW_START_KEY]),
        contract.SOURCE_KEY: tf.identity(inputs[contract.SOURCE_KEY]),
    }
    if config.covariates:
        outputs.update(_covariate_blocks(inputs, config.roles, mean, std))
        return outputs
    outputs[contract.WINDOW_KEY] = zscore.normalise(window, mean, std)
    if config.classification:
        labels = inputs[contract.LABEL_NAME_KEY]
        # By sorted names, or by train windows, most first (--class_order).
        outputs[contract.LABEL_KEY] = class_vocabulary.apply_class_vocabulary(
            labels, order=config.class_order,
            weights=tf.cast(inputs[TRAIN_WINDOWS_KEY], tf.float32),
            # A label whose series have train rows but no train window gets no id.
            frequency_threshold=1)
        outputs[contract.LABEL_NAME_KEY] = tf.identity(labels)
    else:
        outputs[contract.TARGET_KEY] = zscore.normalise(inputs[contract.TARGET_KEY], mean, std)
    return outputs


def _global_statics(per_series: tf.Tensor, global_stat: tf.Tensor, roles: ColumnRoles
                    ) -> tf.Tensor:
    """``[batch, F]`` per-series statistics with the static reals' columns global."""
    if not roles.static_real:
        return per_series
    start, stop = roles.static_slice.start, roles.static_slice.stop
    statics = tf.broadcast_to(global_stat[None, start:stop],
                              tf.shape(per_series[:, start:stop]))
    return tf.concat([per_series[:, :start], statics, per_series[:, stop:]], axis=1)


def transform_targets(values: Any, target_transform: str) -> Any:
    """What ``--target_transform`` applies to targets before they are scaled."""
    return tf.math.log1p(values) if target_transform == "log1p" else values


def _covariate_blocks(inputs: dict[str, tf.Tensor], roles: ColumnRoles, mean: tf.Tensor,
                      std: tf.Tensor) -> dict[str, tf.Tensor]:
    """The covariate layout's blocks; ``mean``/``std`` are ``[F]`` or ``[batch, 1, F]``
    over ``roles.reals`` (targets already transformed)."""
    num_targets, num_window = len(roles.targets), roles.num_window_columns
    window = inputs[contract.WINDOW_KEY]
    window = tf.concat([transform_targets(window[..., :num_targets], roles.target_transform),
                        window[..., num_targets:]], axis=-1)
    target = transform_targets(inputs[contract.TARGET_KEY], roles.target_transform)
    divisor = tf.where(std > 0, std, tf.ones_like(std))
    scale = tf.stack([mean[..., :num_targets], divisor[..., :num_targets]], axis=-1)
    batch = tf.shape(window)[0]
    blocks = {
        contract.WINDOW_KEY: zscore.normalise(window, mean[..., :num_window],
                                              std[..., :num_window]),
        contract.TARGET_KEY: zscore.normalise(target, mean[..., :num_targets],
                                              std[..., :num_targets]),
        contract.TARGET_SCALE_KEY: tf.broadcast_to(
            tf.reshape(scale, [-1, num_targets, 2]), [batch, num_targets, 2]),
    }
    known = []
    if roles.known:
        sl = roles.known_slice
        known.append(zscore.normalise(inputs[contract.KNOWN_KEY], mean[..., sl],
                                      std[..., sl]))
    if roles.calendar:
        known.append(calendar.calendar_features(inputs[contract.RAW_TIME_KEY],
                                                roles.calendar))
    if known:
        blocks[contract.KNOWN_KEY] = tf.concat(known, axis=-1)
    blocks.update(categories.categorical_blocks(inputs, roles))
    if roles.static_real:
        sl = roles.static_slice
        # [batch, 1, F] per series: the statics' row is the series' own.
        blocks[contract.STATIC_REAL_KEY] = zscore.normalise(
            inputs[contract.STATIC_REAL_KEY], tf.reshape(mean[..., sl], [-1, sl.stop - sl.start]),
            tf.reshape(std[..., sl], [-1, sl.stop - sl.start]))
    return blocks


def _moments(instance: dict[str, Any]) -> exact_stats.Moments:
    return exact_stats.Moments.from_bytes(instance[TRAIN_MOMENTS_KEY])


def _normalisation_entry(summary: dict[str, list[float]]) -> dict[str, Any]:
    return {"normalisation": {"per_series": False, **summary}}


class DescribeNormalisation(beam.PTransform):
    """Analysis instances → the manifest's single ``{"normalisation": ...}`` entry.

    Global: ``{"per_series": False, "mean": [F], "std": [F]}``, the float32 values
    ``preprocessing_fn`` applies (``zscore.SummariseMoments`` over the instances'
    moments; ``std`` is the divisor: 1 for a constant column). Per series:
    ``{"per_series": True}``; the statistics live only in the transform_fn.
    """

    def __init__(self, config: SeriesPreprocessing) -> None:
        super().__init__()
        self._config = config

    def expand(self, instances: beam.PCollection) -> beam.PCollection:
        if self._config.per_series:
            return instances.pipeline | "PerSeries" >> beam.Create(
                [{"normalisation": {"per_series": True}}])
        return (instances
                | "TrainMoments" >> beam.Map(_moments)
                | "Summarise" >> zscore.SummariseMoments(self._config.num_features)
                | "NormalisationEntry" >> beam.Map(_normalisation_entry))
