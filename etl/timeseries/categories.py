"""Categorical covariates: train-only vocabularies, their ids, and the manifest entry.

A categorical column's values are texts (``sources.category_text``; an empty cell is
the category ``""``). The series step hands the analysis, per series with train rows,
each categorical column's distinct train texts and how many train rows hold each
(``analysis_features``); ``tft.vocabulary`` sums those counts, so each vocabulary is
exactly the one a row-by-row count of the train rows gives: most frequent first,
ties in reverse byte order (tf.Transform's order). Vocabularies are written as
``tfrecord_gzip`` files, which keep every text, the empty one included (the text
format drops empty texts and texts with line breaks).

The graph maps the raw texts of ``known_cat`` ``[W + H, Kc]`` and ``static_cat``
``[Sc]`` to int64 ids with ``tft.apply_vocabulary`` and one out-of-vocabulary
bucket: a text no train row holds (a store first seen in the test period) gets id
``size``, the same for every such text. A model's embedding for a column therefore
takes ``cardinality = size + 1`` ids, the manifest's ``categories`` entry, which
also lists each vocabulary's texts in id order (``values``), so a reader maps ids
back to texts without TensorFlow.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import tensorflow as tf
import tensorflow_transform as tft

from etl.timeseries.roles import ColumnRoles
from reader.format import contract

VOCABULARY_FORMAT = "tfrecord_gzip"
OOV_BUCKETS = 1


def _texts_key(index: int) -> str:
    return f"train_category_{index}"


def _rows_key(index: int) -> str:
    return f"train_category_rows_{index}"


def analysis_feature_spec(roles: ColumnRoles | None) -> dict[str, tf.io.VarLenFeature]:
    """Analysis-only raw features: per categorical, its train texts and their row
    counts in one series."""
    spec = {}
    for index in range(len(roles.categoricals) if roles is not None else 0):
        spec[_texts_key(index)] = tf.io.VarLenFeature(tf.string)
        spec[_rows_key(index)] = tf.io.VarLenFeature(tf.int64)
    return spec


def analysis_features(counts: Sequence[tuple[list[str], list[int]]], roles: ColumnRoles,
                      steps: int) -> dict[str, Any]:
    """A series' analysis features from ``(texts, rows)`` per categorical column.

    They include empty raw blocks (``steps`` = W + H): ``tft.apply_vocabulary``
    records its ids' range in the output schema, which makes its input an analysis
    input too (``tft.get_analyze_input_columns``), though no analyzer reads it.
    """
    features: dict[str, Any] = {}
    for index, (texts, rows) in enumerate(counts):
        features[_texts_key(index)] = texts
        features[_rows_key(index)] = rows
    if roles.known_categorical:
        features[contract.KNOWN_CAT_KEY] = [""] * (steps * len(roles.known_categorical))
    if roles.static_categorical:
        features[contract.STATIC_CAT_KEY] = [""] * len(roles.static_categorical)
    return features


def categorical_blocks(inputs: dict[str, tf.Tensor], roles: ColumnRoles
                       ) -> dict[str, tf.Tensor]:
    """``known_cat`` ``[batch, W + H, Kc]`` and ``static_cat`` ``[batch, Sc]`` ids
    (int64) of the raw texts, by vocabularies fit on the analysis features."""
    ids: dict[str, list[tf.Tensor]] = {contract.KNOWN_CAT_KEY: [],
                                       contract.STATIC_CAT_KEY: []}
    for index, (_, name) in enumerate(roles.vocabularies()):
        texts = inputs[_texts_key(index)]
        rows = inputs[_rows_key(index)]
        vocabulary = tft.vocabulary(texts.values, weights=tf.cast(rows.values, tf.float32),
                                    vocab_filename=name, file_format=VOCABULARY_FORMAT)
        key, column = _raw_column(roles, index)
        ids[key].append(tft.apply_vocabulary(
            inputs[key][..., column], vocabulary, num_oov_buckets=OOV_BUCKETS,
            file_format=VOCABULARY_FORMAT))
    return {key: tf.stack(columns, axis=-1) for key, columns in ids.items() if columns}


def _raw_column(roles: ColumnRoles, index: int) -> tuple[str, int]:
    """Which raw block, and which column of it, holds categorical ``index``."""
    if index < len(roles.known_categorical):
        return contract.KNOWN_CAT_KEY, index
    return contract.STATIC_CAT_KEY, index - len(roles.known_categorical)


def describe_categories(transform_dir: str, roles: ColumnRoles) -> dict[str, Any]:
    """The manifest's ``categories`` entry: per categorical column, its block, its
    vocabulary's name, size and texts in id order, the out-of-vocabulary id and the
    cardinality (ids a model's embedding takes)."""
    output = tft.TFTransformOutput(transform_dir)
    entry = {}
    for index, (column, name) in enumerate(roles.vocabularies()):
        values = [text.decode() for text in output.vocabulary_by_name(name)]
        entry[column] = {"block": _raw_column(roles, index)[0], "vocabulary": name,
                         "size": len(values), "values": values, "oov_id": len(values),
                         "cardinality": len(values) + OOV_BUCKETS}
    return {"categories": entry}
