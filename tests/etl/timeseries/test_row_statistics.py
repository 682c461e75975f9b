"""The kept rows' and series' statistics of the series step, against pandas.

A few literal series (missing values, time gaps, a known covariate missing, a
categorical column, labels, series the step rejects) go through ``ReadSeriesChunks``
→ ``ProcessSeriesBucket`` in one ``TestPipeline``; the merged statistics per split are
checked against the same facts worked out with pandas from the rows and the rules of
``etl/timeseries/row_statistics.py``'s docstring.
"""

from __future__ import annotations

import json
import math
import os
from typing import Any

import apache_beam as beam
import numpy as np
import pandas as pd
import pytest
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to
from google.protobuf import json_format

from etl.core.shards.splits import SplitFractions
from etl.core.stats.features import merge_in_order
from etl.core.stats.step import ROWS, SERIES
from etl.timeseries import series as ts_series
from etl.timeseries.buckets import STATISTICS, ProcessSeriesBucket, SeriesSettings
from etl.timeseries.preprocessing import SeriesPreprocessing
from etl.timeseries.roles import ColumnRoles
from etl.timeseries.row_statistics import BucketStatistics, StatisticsLayout
from etl.timeseries.rows import read
from etl.timeseries.rows.sources import Columns
from etl.timeseries.rows.time_texts import NUMERIC_BIT, TimeTexts
from reader.format import contract

RUNNER = "apache_beam.runners.portability.fn_api_runner.FnApiRunner"
CUTOFFS = (10.0, 16.0)  # train < 10 <= validation < 16 <= test
MAX_GAP = 1.5
NAN = math.nan


def _forecast_rows() -> list[dict]:
    """Series with a value (target), a price (known real) and a weather (known
    categorical; "" is an empty cell)."""
    rows = []
    for t in [t for t in range(20) if t != 5]:  # a: a gap at 5, value missing at 12
        rows.append(("a", t, NAN if t == 12 else t + 0.5, NAN if t == 17 else 10 + t / 4,
                     ["sun", "", "rain"][t % 3]))
    for t in range(3, 25):  # b: value missing at 9, price at 3 (its first row)
        rows.append(("b", t, NAN if t == 9 else 100.0 - t, NAN if t == 3 else 7.0,
                     "" if t == 20 else "sun"))
    for t in range(20, 27):  # c: test only, price missing at 21
        rows.append(("c", t, float(t % 4), NAN if t == 21 else 1.0, "fog"))
    rows += [("e", 0, 1.0, 1.0, "sun"), ("e", 1, 2.0, 1.0, "sun")]  # too short
    return [{"series_id": s, "timestamp": t, "value": None if math.isnan(v) else v,
             "price": None if math.isnan(p) else p, "weather": w} for s, t, v, p, w in rows]


CLASS_LABELS = {"p": "up", "q": "down", "r": "up", "s": "down"}


def _classification_rows() -> list[dict]:
    rows = [("p", t, NAN if t == 15 else float(t), NAN if t == 4 else t * t / 10)
            for t in range(18)]
    rows += [("q", t, NAN if t == 11 else 5.0, NAN if t == 11 else -t) for t in range(10, 14)]
    rows += [("r", t, 1.0, 1.0) for t in range(0, 30, 2)]  # every step a gap: too short
    rows += [("s", t, float(i), 0.0) for i, t in enumerate([0, 1, 2, 6, 7, 8, 20, 21])]
    rows += [("u", t, 1.0, 1.0) for t in range(6)]  # no label
    return [{"series_id": s, "timestamp": t, "x": None if math.isnan(x) else x,
             "y": None if math.isnan(y) else y} for s, t, x, y in rows]


def _split_of(times: pd.Series) -> np.ndarray:
    return np.select([times < CUTOFFS[0], times < CUTOFFS[1]],
                     [contract.TRAIN, contract.VALIDATION], contract.TEST)


def _expected(rows: list[dict], policy: list[str], known: list[str], categoricals: list[str],
              labels: dict[str, str] | None, span: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(kept rows, one row per kept series and split) as the docstring defines them."""
    frame = pd.DataFrame(rows)
    reals = policy + known
    frame["cells"] = (frame[reals].isna().sum(axis=1)
                      + (frame[categoricals] == "").sum(axis=1))
    kept_rows, series_rows = [], []
    for series_id, raw in frame.groupby("series_id"):
        if labels is not None and series_id not in labels:
            continue
        raw = raw.sort_values("timestamp")
        clean = raw[raw[policy].notna().all(axis=1)].copy()
        clean["split"] = _split_of(clean["timestamp"])
        clean["gap"] = clean["timestamp"].diff() > MAX_GAP
        removed = clean[known].isna().any(axis=1)
        starts = (clean["gap"] | (clean["split"] != clean["split"].shift())
                  | removed.shift(fill_value=True))
        clean["piece"] = starts.cumsum()
        final = clean[~removed]
        if not (final.groupby("piece").size() >= span).any():
            continue  # no window: the series is a dead letter
        # Each raw row's empty cells go to the split of the last clean row at or before it.
        owner = pd.merge_asof(raw[["timestamp", "cells"]], clean[["timestamp", "split"]],
                              on="timestamp", direction="backward")
        owner["split"] = owner["split"].fillna(clean["split"].iloc[0])
        label = labels[series_id] if labels is not None else None
        kept_rows.append(final.assign(label=label))
        for split, part in final.groupby("split"):
            series_rows.append({
                "split": split, "length": len(part), "pieces": part["piece"].nunique(),
                "gaps": int(clean.loc[clean["split"] == split, "gap"].sum()),
                "missing": int(owner.loc[owner["split"] == split, "cells"].sum()),
                "label": label})
    return pd.concat(kept_rows), pd.DataFrame(series_rows)


def _features(dataset) -> dict[str, Any]:
    return {feature.path.step[0]: feature for feature in dataset.features}


def _check_numbers(feature, values: pd.Series) -> None:
    stats = feature.num_stats
    assert stats.common_stats.num_non_missing == values.notna().sum()
    assert stats.common_stats.num_missing == values.isna().sum()
    assert stats.mean == pytest.approx(values.mean(), rel=1e-12)
    assert (stats.min, stats.max) == (values.min(), values.max())


def _check_texts(feature, values: pd.Series) -> None:
    stats = feature.string_stats
    present = values[values != ""]
    assert stats.common_stats.num_missing == len(values) - len(present)
    assert {v.value: v.frequency for v in stats.top_values} == (
        present.value_counts().to_dict())


def _check(partials: list, rows: pd.DataFrame, series: pd.DataFrame, reals: list[str],
           categoricals: list[str]) -> None:
    """The partials merged per split against the expected rows and series."""
    grouped: dict[tuple[str, str], list] = {}
    for key, part in partials:
        grouped.setdefault(key, []).append(part)
    splits = sorted(set(rows["split"]))
    assert sorted(grouped) == sorted((s, kind) for s in splits for kind in (ROWS, SERIES))
    with_labels = rows["label"].notna().all()
    for split in splits:
        kept = rows[rows["split"] == split]
        dataset = merge_in_order(grouped[split, ROWS]).to_proto(split)
        assert dataset.num_examples == len(kept)
        features = _features(dataset)
        assert list(features) == reals + categoricals + (["label"] if with_labels else [])
        for name in reals:
            _check_numbers(features[name], kept[name])
        for name in categoricals + (["label"] if with_labels else []):
            _check_texts(features[name], kept[name])
        expected = series[series["split"] == split]
        dataset = merge_in_order(grouped[split, SERIES]).to_proto(split)
        assert dataset.num_examples == len(expected)
        features = _features(dataset)
        for name in ("length", "pieces", "gaps", "missing"):
            _check_numbers(features[name], expected[name].astype(float))
        if with_labels:
            _check_texts(features["label"], expected["label"])


def _write(tmp_path, name: str, rows: list[dict]) -> str:
    path = os.path.join(tmp_path, name)
    with open(path, "w") as f:
        f.writelines(json.dumps(row) + "\n" for row in rows)
    return path


def _branch(p, tmp_path, name: str, rows: list[dict], columns: Columns,
            preprocessing: SeriesPreprocessing, windowing: ts_series.Windowing,
            labels: dict[str, str], statistics: bool) -> beam.PCollection:
    """The series step's STATISTICS output on ``rows``, wired as the job wires it."""
    plan = read.InputPlan.from_pattern(_write(tmp_path, f"{name}.jsonl", rows), columns)
    settings = SeriesSettings(
        windowing=windowing, cleaning=ts_series.Cleaning(max_gap=MAX_GAP),
        time_split=ts_series.TimeSplit("time", cutoffs=CUTOFFS),
        schema=preprocessing.window_schema(), spill_dir=os.path.join(tmp_path, name),
        roles=preprocessing.roles, statistics=statistics)
    chunks = p | f"Read{name}" >> read.ReadSeriesChunks(
        plan, columns, os.path.join(tmp_path, f"{name}-rows"))
    return (chunks.chunks
            | f"Group{name}" >> beam.GroupByKey()
            | f"Process{name}" >> beam.ParDo(
                ProcessSeriesBucket(settings, plan.files, plan.fmt), labels=labels
            ).with_outputs(STATISTICS, main="runs"))[STATISTICS]


def test_series_step_statistics_match_pandas_and_are_off_when_asked(tmp_path):
    roles = ColumnRoles(targets=("value",), known=("price",), known_categorical=("weather",),
                        given=True)
    forecast_rows, forecast_series = _expected(
        _forecast_rows(), ["value"], ["price"], ["weather"], None, span=3)
    assert set(forecast_rows["series_id"]) == {"a", "b", "c"}
    class_rows, class_series = _expected(
        _classification_rows(), ["x", "y"], [], [], CLASS_LABELS, span=2)
    assert set(class_rows["series_id"]) == {"p", "q", "s"}
    classify = SeriesPreprocessing(2, 0, 2, True, roles=ColumnRoles(targets=("x", "y")))
    columns = Columns("series_id", "timestamp", ("x", "y"))
    with TestPipeline(runner=RUNNER) as p:
        forecast = _branch(
            p, tmp_path, "forecast", _forecast_rows(),
            Columns("series_id", "timestamp", roles.reals, roles.categoricals),
            SeriesPreprocessing(2, 1, 2, False, roles=roles), ts_series.Windowing(2), {},
            statistics=True)
        labelled = _branch(p, tmp_path, "classify", _classification_rows(), columns,
                           classify, ts_series.Windowing(2, horizon=0), CLASS_LABELS,
                           statistics=True)
        off = _branch(p, tmp_path, "off", _classification_rows(), columns, classify,
                      ts_series.Windowing(2, horizon=0), CLASS_LABELS, statistics=False)
        assert_that(forecast, lambda parts: _check(
            parts, forecast_rows, forecast_series, ["value", "price"], ["weather"]),
            label="CheckForecast")
        assert_that(labelled, lambda parts: _check(
            parts, class_rows, class_series, ["x", "y"], []), label="CheckClassification")
        assert_that(off, equal_to([]), label="CheckOff")


def _random_series(rng: np.random.Generator, length: int) -> ts_series.SeriesRows:
    """``length`` rows a step apart but for two wider steps, about 5 % values missing."""
    steps = np.ones(length)
    steps[rng.integers(1, length, 2)] = 7.0
    values = rng.normal(50.0, 20.0, (length, 2))
    values[rng.random((length, 2)) < 0.05] = np.nan
    return ts_series.SeriesRows(
        times=np.cumsum(steps), values=values, positions=np.arange(length),
        texts=TimeTexts.stored([str(i) for i in range(length)]),
        kinds=NUMERIC_BIT)


def _as_dict(statistics, split: str) -> dict:
    return json_format.MessageToDict(statistics.to_proto(split))


def _assert_close(actual: Any, expected: Any, where: str = "") -> None:
    """Equal, but floats within 1e-9 (merges sum in another order)."""
    if isinstance(expected, dict):
        assert sorted(actual) == sorted(expected), where
        for key in expected:
            _assert_close(actual[key], expected[key], f"{where}.{key}")
    elif isinstance(expected, list):
        assert len(actual) == len(expected), where
        for index, (a, e) in enumerate(zip(actual, expected, strict=True)):
            _assert_close(a, e, f"{where}[{index}]")
    elif isinstance(expected, float):
        assert actual == pytest.approx(expected, rel=1e-9, abs=1e-9), where
    else:
        assert actual == expected, where


def test_bucket_statistics_merged_over_buckets_equal_one_over_everything():
    rng = np.random.default_rng(5)
    layout = StatisticsLayout(("x", "y"), classification=True)
    whole = BucketStatistics(layout, [])
    buckets = [BucketStatistics(layout, []) for _ in range(3)]
    split = ts_series.TimeSplit("time", SplitFractions(0.6, 0.2, 0.2))
    for index in range(12):
        rows = _random_series(rng, int(rng.integers(30, 200)))
        cleaned = ts_series.clean_rows(str(index), rows, ts_series.Cleaning(max_gap=3.0),
                                       str)
        pieces = ts_series.split_pieces(str(index), cleaned.segments, split)
        for statistics in (whole, buckets[index % 3]):
            statistics.add_series(rows, cleaned.segments, pieces, pieces,
                                  ["up", "down"][index % 2])
    merged: dict[tuple[str, str], list] = {}
    for bucket, statistics in enumerate(buckets):
        for key, part in statistics.partials(bucket):
            merged.setdefault(key, []).append(part)
    expected = {key: part for key, (_, part) in whole.partials(0)}
    assert sorted(merged) == sorted(expected)
    for (name, kind), parts in merged.items():
        _assert_close(_as_dict(merge_in_order(parts), name),
                      _as_dict(expected[name, kind], name), f"{name}/{kind}")


def test_statistics_layout_names_the_features_and_refuses_a_label_column():
    roles = ColumnRoles(targets=("sales",), known=("price",), static_categorical=("store",),
                        given=True)
    layout = StatisticsLayout.of(roles, classification=False)
    assert [(f.name, f.kind) for f in layout.row_features()] == [
        ("sales", "float"), ("price", "float"), ("store", "string")]
    assert [(f.name, f.kind) for f in StatisticsLayout(("v",), (), True).series_features()
            ] == [("length", "int"), ("pieces", "int"), ("gaps", "int"), ("missing", "int"),
                  ("label", "string")]
    with pytest.raises(ValueError, match="named 'label'"):
        StatisticsLayout(("label",), classification=True)
    with pytest.raises(ValueError, match="roles"):
        StatisticsLayout.of(None, classification=False)
