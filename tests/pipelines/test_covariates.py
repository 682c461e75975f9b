"""Forecasting with column roles, end to end on M5-shaped data the test generates.

Every stored block is recomputed here from the raw CSV with pandas and numpy (train
rows by the job's documented time split, statistics in float64 from the float32
values, vocabularies by counting train rows), never from the job's own code.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from tests.job_runs import all_records, rejected_records, shard_digests
from tests.m5_fixtures import m5_frame, write_m5_csv
from tests.series_fixtures import run_timeseries_job

W, H, SHIFT = 14, 7, 7
ROLE_FLAGS = ("--timestamp_column=date", "--target_columns=sales",
              "--past_columns=visits", "--known_columns=price,promo",
              "--static_real_columns=store_size,item_weight",
              "--known_categorical_columns=event",
              "--static_categorical_columns=store_id,item_id",
              "--calendar_features=day_of_week,month,day_of_year",
              "--target_transform=log1p", f"--window_size={W}", f"--horizon={H}",
              f"--shift={SHIFT}")
REALS = ["sales", "visits", "price", "promo", "store_size", "item_weight"]
CATEGORICALS = {"known_cat": ["event"], "static_cat": ["store_id", "item_id"]}
BLOCKS = ("window", "target", "known", "known_cat", "static_cat", "static_real",
          "target_scale")
# An event first held in the test period (rows 216 on): out of the train vocabulary.
NEW_EVENT_DAY, NEW_EVENT = 230, "launch"


def _frame() -> pd.DataFrame:
    frame = m5_frame(items=3, stores=2, days=240, seed=1)
    frame.loc[frame.groupby("series_id").cumcount() == NEW_EVENT_DAY, "event"] = NEW_EVENT
    return frame


@pytest.fixture(scope="module")
def m5(tmp_path_factory):
    folder = tmp_path_factory.mktemp("m5")
    frame = _frame()
    path = write_m5_csv(str(folder / "m5.csv"), frame)
    out = str(folder / "out")
    manifest = run_timeseries_job(path, out, *ROLE_FLAGS)
    return frame, path, out, manifest


def _train_rows(frame: pd.DataFrame) -> pd.DataFrame:
    """The first round(0.8 n) rows of each series in time (the default split)."""
    position = frame.sort_values("date").groupby("series_id").cumcount().reindex(
        frame.index)
    rows = frame.groupby("series_id")["date"].transform("size")
    return frame[position < rows.map(lambda n: round(n * 0.8))]


def _statistics(frame: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    train = _train_rows(frame)[REALS].to_numpy(np.float32).astype(np.float64)
    train[:, 0] = np.log1p(train[:, 0].astype(np.float32)).astype(np.float64)
    mean, std = train.mean(axis=0), train.std(axis=0)
    return mean, np.where(std > 0, std, 1.0)


def _vocabulary(values: pd.Series) -> dict[str, int]:
    """text → id: most train rows first, ties in reverse byte order."""
    counts = sorted(values.value_counts().items(), key=lambda kv: (kv[1], kv[0].encode()),
                    reverse=True)
    return {text: index for index, (text, _) in enumerate(counts)}


def _vocabularies(frame: pd.DataFrame) -> dict[str, dict[str, int]]:
    train = _train_rows(frame)
    return {column: _vocabulary(train[column])
            for columns in CATEGORICALS.values() for column in columns}


def _ids(vocabulary: dict[str, int], texts: np.ndarray) -> np.ndarray:
    return np.array([vocabulary.get(t, len(vocabulary)) for t in texts], np.int64)


def _calendar(dates: pd.DatetimeIndex) -> np.ndarray:
    return np.stack([dates.dayofweek / 6 - 0.5, (dates.month - 1) / 11 - 0.5,
                     (dates.dayofyear - 1) / 365 - 0.5], axis=-1)


def _expected_blocks(frame: pd.DataFrame, series_id: str, start: str,
                     mean: np.ndarray, std: np.ndarray,
                     vocabularies: dict[str, dict[str, int]]) -> dict[str, np.ndarray]:
    rows = frame[frame.series_id == series_id].sort_values("date").reset_index(drop=True)
    first = int(np.flatnonzero(rows.date.to_numpy() == start)[0])
    span = rows.iloc[first:first + W + H]
    values = span[REALS].to_numpy(np.float32).astype(np.float64)
    values[:, 0] = np.log1p(values[:, 0])
    z = (values - mean) / std
    return {"window": z[:W, :2], "target": z[W:, :1],
            "known": np.concatenate([z[:, 2:4], _calendar(pd.DatetimeIndex(span.date))],
                                    axis=1),
            "static_real": z[0, 4:], "target_scale": np.array([[mean[0], std[0]]]),
            "known_cat": _ids(vocabularies["event"], span.event.to_numpy())[:, None],
            "static_cat": np.array([_ids(vocabularies[c], span[c].to_numpy()[:1])[0]
                                    for c in CATEGORICALS["static_cat"]]),
            "raw_target": span.sales.to_numpy()[W:, None]}


def test_every_block_equals_an_independent_computation(m5):
    from reader import open_dataset

    frame, _, out, manifest = m5
    mean, std = _statistics(frame)
    vocabularies = _vocabularies(frame)
    records = all_records(out, manifest)
    info = open_dataset(out)
    # Windows per split from the documented split: 192 / 24 / 24 rows per series.
    per_series = {split: (rows - (W + H)) // SHIFT + 1
                  for split, rows in (("train", 192), ("validation", 24), ("test", 24))}
    assert {s: manifest["splits"][s]["num_records"] for s in per_series} == {
        s: 6 * n for s, n in per_series.items()}
    assert len(records) == 6 * sum(per_series.values())
    sampled = sorted(records)[::5] + [k for k, (split, _) in records.items()
                                      if split == "test"]
    oov = len(vocabularies["event"])
    assert NEW_EVENT not in vocabularies["event"] and any(
        oov in records[k][1]["known_cat"] for k in sampled)  # the test period's new event
    for key in sampled:
        stored = records[key][1]
        series_id, start = key.split("@")
        expected = _expected_blocks(frame, series_id, start, mean, std, vocabularies)
        np.testing.assert_array_equal(stored["known_cat"].reshape(W + H, 1),
                                      expected["known_cat"], err_msg=key)
        np.testing.assert_array_equal(stored["static_cat"], expected["static_cat"])
        for name in ("window", "target", "known", "static_real", "target_scale"):
            np.testing.assert_allclose(stored[name].reshape(expected[name].shape),
                                       expected[name], rtol=2e-5, atol=2e-5,
                                       err_msg=f"{key} {name}")
        # Back to real units: the stored target, its target_scale, and expm1.
        target = stored["target"].reshape(H, 1).astype(np.float64)
        scale = stored["target_scale"].reshape(1, 2).astype(np.float64)
        np.testing.assert_allclose(np.expm1(target * scale[:, 1] + scale[:, 0]),
                                   expected["raw_target"], rtol=1e-5, atol=1e-4)
        np.testing.assert_allclose(info.inverse_target(target, scale),
                                   expected["raw_target"], rtol=1e-5, atol=1e-4)


def test_the_manifest_names_each_block_channel(m5):
    frame, _, _, manifest = m5
    roles = manifest["preprocessing"]["column_roles"]
    assert roles["blocks"] == {
        "window": {"shape": [W, 2], "channels": ["sales", "visits"]},
        "target": {"shape": [H, 1], "channels": ["sales"]},
        "known": {"shape": [W + H, 5], "channels": [
            "price", "promo", "calendar:day_of_week", "calendar:month",
            "calendar:day_of_year"]},
        "known_cat": {"shape": [W + H, 1], "channels": ["event"]},
        "static_cat": {"shape": [2], "channels": ["store_id", "item_id"]},
        "static_real": {"shape": [2], "channels": ["store_size", "item_weight"]},
        "target_scale": {"shape": [1, 2], "channels": ["centre", "scale"]},
    }
    assert roles["target_transform"] == "log1p"
    for name in BLOCKS:
        assert manifest["features"][name]["shape"] == roles["blocks"][name]["shape"]
    # Cardinalities: the train vocabulary's size plus the out-of-vocabulary id.
    vocabularies = _vocabularies(frame)
    assert manifest["categories"] == {
        column: {"block": block, "vocabulary": f"{block}_{k}",
                 "size": len(vocabularies[column]), "values": list(vocabularies[column]),
                 "oov_id": len(vocabularies[column]),
                 "cardinality": len(vocabularies[column]) + 1}
        for block, columns in CATEGORICALS.items() for k, column in enumerate(columns)}


def _raw_blocks(frame: pd.DataFrame, keys: list[str]) -> dict[str, np.ndarray]:
    """What serving feeds ``transform_fn`` for these windows, from the raw rows."""
    blocks: dict[str, list] = {k: [] for k in ("window", "target", "known", "time",
                                               "static_real", "known_cat", "static_cat")}
    for key in keys:
        series_id, start = key.split("@")
        rows = frame[frame.series_id == series_id].sort_values("date")
        first = int(np.flatnonzero(rows.date.to_numpy() == start)[0])
        span = rows.iloc[first:first + W + H]
        blocks["window"].append(span[["sales", "visits"]].to_numpy(np.float32)[:W])
        blocks["target"].append(span[["sales"]].to_numpy(np.float32)[W:])
        blocks["known"].append(span[["price", "promo"]].to_numpy(np.float32))
        blocks["time"].append(((pd.to_datetime(span.date) - pd.Timestamp(0))
                               // pd.Timedelta(seconds=1)).to_numpy(np.int64))
        blocks["static_real"].append(
            span[["store_size", "item_weight"]].to_numpy(np.float32)[0])
        blocks["known_cat"].append(span[["event"]].to_numpy().astype(bytes))
        blocks["static_cat"].append(span[["store_id", "item_id"]].to_numpy()[0].astype(bytes))
    return {name: np.stack(values) for name, values in blocks.items()}


def test_serving_transform_fn_reproduces_every_stored_block(m5):
    import tensorflow as tf
    import tensorflow_transform as tft

    frame, _, out, manifest = m5
    records = all_records(out, manifest)
    keys = sorted(records)[::7] + [k for k, (split, _) in records.items() if split == "test"]
    raw = _raw_blocks(frame, keys)
    served = tft.TFTransformOutput(out).transform_raw_features({
        **{name: tf.constant(value) for name, value in raw.items()},
        "series_id": tf.constant([k.split("@")[0].encode() for k in keys]),
        "window_start": tf.constant([k.split("@")[1].encode() for k in keys]),
        "key": tf.constant([k.encode() for k in keys]),
    })
    for name in BLOCKS:
        stored = np.stack([records[k][1][name] for k in keys])
        np.testing.assert_array_equal(served[name].numpy().reshape(stored.shape), stored,
                                      err_msg=name)


def test_validation_and_test_rows_change_no_train_byte_on_any_worker_count(m5, tmp_path):
    frame, _, out, manifest = m5
    changed = frame.copy()
    later = changed.groupby("series_id").cumcount() >= 192  # validation and test rows
    changed.loc[later, "sales"] *= 10
    changed.loc[later, "price"] += 3.5
    changed.loc[later, "visits"] = -changed.loc[later, "visits"]
    changed.loc[later, "event"] = "late " + changed.loc[later, "event"]
    changed.loc[later & (changed.series_id == "item0_store0"), "store_id"] = ""
    path = write_m5_csv(str(tmp_path / "changed.csv"), changed)
    # Two workers here, one for the fixture's run: the train shards are the same bytes.
    other = run_timeseries_job(path, str(tmp_path / "out"), *ROLE_FLAGS,
                               "--direct_num_workers=2",
                               "--direct_running_mode=multi_threading")
    assert other["normalisation"] == manifest["normalisation"]
    assert other["categories"] == manifest["categories"]
    for name in ("known_cat_0", "static_cat_0", "static_cat_1"):  # the vocabularies
        assert _vocabulary_file(out, name) == _vocabulary_file(str(tmp_path / "out"), name)
    train_shards = {p: d for p, d in shard_digests(out).items() if p.startswith("train/")}
    assert train_shards and train_shards == {
        p: d for p, d in shard_digests(str(tmp_path / "out")).items()
        if p.startswith("train/")}
    train = {k: r for k, (split, r) in all_records(out, manifest).items()
             if split == "train"}
    other_records = all_records(str(tmp_path / "out"), other)
    other_train = {k: r for k, (split, r) in other_records.items() if split == "train"}
    assert sorted(train) == sorted(other_train)
    for key, stored in train.items():
        for name, value in stored.items():
            np.testing.assert_array_equal(other_train[key][name], value, err_msg=key)
    # The change did reach validation and test.
    some_test = next(k for k, (split, _) in other_records.items() if split == "test")
    assert not np.array_equal(other_records[some_test][1]["target"],
                              all_records(out, manifest)[some_test][1]["target"])


def _vocabulary_file(out: str, name: str) -> bytes:
    with open(f"{out}/transform_fn/assets/{name}.tfrecord.gz", "rb") as f:
        return f.read()


def test_bad_series_and_rows_are_dead_letters_and_counts_reconcile(tmp_path):
    frame = m5_frame(items=2, stores=2, days=100, seed=2)
    ids = sorted(frame.series_id.unique())
    varying, gap, negative, other_store = ids
    frame.loc[(frame.series_id == varying) & (frame.index % 100 == 50), "store_size"] = 999.0
    frame.loc[(frame.series_id == other_store) & (frame.index % 100 == 70), "store_id"] = "x"
    gap_rows = frame.index[frame.series_id == gap]
    frame.loc[gap_rows[30], "price"] = np.nan  # in the train split: 80 rows
    negative_row = frame.index[frame.series_id == negative][10]
    frame.loc[negative_row, "sales"] = -1.0
    path = write_m5_csv(str(tmp_path / "bad.csv"), frame)
    out = str(tmp_path / "out")
    manifest = run_timeseries_job(path, out, *ROLE_FLAGS, "--max_error_fraction=0.6",
                                  "--normalize=per_series")
    reasons = {(r["reason"], r["key"].split("@")[0]) for r in rejected_records(out)}
    assert reasons == {("static_varies", varying), ("negative_under_log1p", negative),
                       ("static_varies", other_store)}
    counts = manifest["timeseries"]["counts"]
    assert counts["rows_read"] == len(frame) and counts["rows_rejected"] == 2 * 100 + 1
    assert counts["rows_missing_known"] == 1
    # 80 train rows: 9 windows; cut at row 30 into 30 and 49 rows: 2 + 5 windows.
    assert counts["windows_missing_known"] == 9 - 7
    records = all_records(out, manifest)
    gap_date = frame.loc[gap_rows[30], "date"]
    dates = sorted(frame.loc[gap_rows, "date"])
    for key in records:
        series_id, start = key.split("@")
        if series_id == gap:
            first = dates.index(start)
            assert gap_date not in dates[first:first + W + H], key
    assert not any(k.startswith((varying + "@", other_store + "@")) for k in records)
    _check_per_series_scaling(frame.drop(index=negative_row), records,
                              skip=(varying, other_store), missing_known=gap_rows[30])


def _check_per_series_scaling(frame: pd.DataFrame, records: dict, skip: tuple[str, ...],
                              missing_known: int) -> None:
    """Per series: targets, past and known columns scaled by the series' own train
    rows, static reals by every series' train rows (per series they would all be 0);
    a row missing a known value is in no statistic."""
    frame = frame[~frame.series_id.isin(skip)]
    train = _train_rows(frame).drop(index=missing_known)
    values = train[REALS].to_numpy(np.float32).astype(np.float64)
    values[:, 0] = np.log1p(values[:, 0])
    static_mean, static_std = values[:, 4:].mean(axis=0), values[:, 4:].std(axis=0)
    for key, (_, stored) in sorted(records.items())[::9]:
        series_id = key.split("@")[0]
        own = values[(train.series_id == series_id).to_numpy()]
        np.testing.assert_allclose(stored["target_scale"].reshape(2),
                                   [own[:, 0].mean(), own[:, 0].std()], rtol=1e-5)
        raw = frame[frame.series_id == series_id][["store_size", "item_weight"]].iloc[0]
        np.testing.assert_allclose(stored["static_real"],
                                   (raw.to_numpy(np.float64) - static_mean) / static_std,
                                   rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("flag, message", [
    ("--known_columns=prices", ": pass --known_columns=price (the closest column"),
    ("--calendar_features=weekday", "--calendar_features: unknown ['weekday']"),
    ("--past_columns=sales", "'sales' is in both --target_columns and --past_columns"),
    ("--known_columns=date", "--known_columns names 'date', the series id or timestamp"),
    ("--static_categorical_columns=itemid", ": pass --static_categorical_columns=item_id"),
    ("--known_categorical_columns=sales",
     "'sales' is in both --target_columns and --known_categorical_columns"),
])
def test_a_wrong_role_flag_is_one_clear_error(tmp_path, flag, message):
    path = write_m5_csv(str(tmp_path / "m5.csv"), m5_frame(1, 1, 30))
    with pytest.raises(ValueError) as error:
        run_timeseries_job(path, str(tmp_path / "out"), "--timestamp_column=date",
                           "--target_columns=sales", "--window_size=5", flag)
    assert message in str(error.value)


def test_a_keras_model_with_named_inputs_beats_seasonal_naive(m5):
    import tensorflow as tf

    from reader import make_dataset

    _, _, out, manifest = m5
    train = make_dataset(out, "train", 16, seed=0)
    features, _ = next(iter(train))
    assert sorted(features) == ["known", "known_cat", "static_cat", "static_real", "window"]
    tf.keras.utils.set_random_seed(0)
    inputs = {name: tf.keras.Input(value.shape[1:], name=name, dtype=value.dtype)
              for name, value in features.items()}
    # An embedding per categorical column, as wide as its cardinality.
    embedded = [tf.keras.layers.Embedding(manifest["categories"][column]["cardinality"], 3)(
                    inputs[block][..., k])
                for block, columns in CATEGORICALS.items()
                for k, column in enumerate(columns)]
    reals = [inputs[name] for name in ("window", "known", "static_real")]
    flat = tf.keras.layers.Concatenate()([tf.keras.layers.Flatten()(t)
                                          for t in reals + embedded])
    outputs = tf.keras.layers.Reshape((H, 1))(tf.keras.layers.Dense(H)(flat))
    model = tf.keras.Model(inputs, outputs)
    model.compile(tf.keras.optimizers.Adam(0.01), "mse")
    model.fit(train, epochs=30, verbose=0)
    model_errors, naive_errors = [], []
    for split in ("validation", "test"):
        for x, y in make_dataset(out, split, 64):
            model_errors.append((model.predict(x, verbose=0) - y.numpy()).ravel())
            # Seasonal naive, weekly season: each horizon day repeats a week before.
            naive_errors.append((x["window"][:, W - 7:W - 7 + H, :1] - y).numpy().ravel())
    model_mse = np.mean(np.concatenate(model_errors) ** 2)
    naive_mse = np.mean(np.concatenate(naive_errors) ** 2)
    assert model_mse < 0.8 * naive_mse, (model_mse, naive_mse)


def test_a_store_first_seen_in_the_test_period_gets_the_out_of_vocabulary_id(tmp_path):
    frame = m5_frame(items=1, stores=2, days=60, seed=3)
    # A new store opens in the test period (global cut-offs: train before April).
    new = frame[frame.series_id == "item0_store1"].copy()
    new = new.assign(series_id="item0_store9", store_id="store9",
                     date=pd.to_datetime(new.date).add(pd.Timedelta(days=60))
                     .dt.strftime("%Y-%m-%d"))
    frame = pd.concat([frame, new], ignore_index=True)
    path = write_m5_csv(str(tmp_path / "m5.csv"), frame)
    out = str(tmp_path / "out")
    manifest = run_timeseries_job(
        path, out, "--timestamp_column=date", "--target_columns=sales",
        "--static_categorical_columns=store_id,item_id,series_id",
        "--known_categorical_columns=event", "--split_times=2015-02-20,2015-03-06",
        "--window_size=7", "--horizon=2")
    train = frame[frame.date < "2015-02-20"]
    stores, series = _vocabulary(train.store_id), _vocabulary(train.series_id)
    assert sorted(stores) == ["store0", "store1"]
    assert manifest["categories"]["store_id"]["oov_id"] == 2
    records = all_records(out, manifest)
    new_store = {k: r for k, (split, r) in records.items() if k.startswith("item0_store9@")}
    assert new_store and all(split == "test" for k, (split, _) in records.items()
                             if k in new_store)
    for key, (_, stored) in records.items():
        series_id = key.split("@")[0]
        # The series id as a static category too: the new series is out of vocabulary.
        assert list(stored["static_cat"][[0, 2]]) == [
            stores.get(series_id.split("_")[1], 2), series.get(series_id, 2)], key
