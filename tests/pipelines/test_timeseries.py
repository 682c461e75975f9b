"""End-to-end tests of ``python -m pipelines.timeseries`` on series generated here."""

from __future__ import annotations

import csv
import json
import math
import os
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
import tensorflow as tf

import reader
from etl.core.publishing import accounting
from etl.core.run import fault_injection, resume
from etl.core.shards import placement, splits
from etl.timeseries.series import Cleaning
from pipelines import runner_defaults, timeseries
from reader.format import contract
from reader.tfdata.feature_specs import feature_spec_from_json
from tests.job_commands import REPO_ROOT, run_until_killed
from tests.job_runs import output_digests, printing
from tests.series_fixtures import GEOMETRY, series_rows, write_jsonl
from tests.series_fixtures import run_timeseries_job as run_job


def read_records(out: str, manifest: dict, split: str) -> list[dict]:
    spec = feature_spec_from_json(manifest["features"])
    files = [os.path.join(out, s["path"]) for s in manifest["splits"][split]["shards"]]
    if not files:
        return []
    dataset = tf.data.TFRecordDataset(files, compression_type="GZIP").map(
        lambda r: tf.io.parse_single_example(r, spec))
    return list(dataset.as_numpy_iterator())


def expected_counts(length: int, fractions=(0.8, 0.1, 0.1), window=6, shift=2, stride=2,
                    horizon=3) -> dict[str, int]:
    """Windows per split for one gap-free series of ``length`` rows, from the formula."""
    first_validation = min(length, round(length * fractions[0]))
    first_test = min(length, max(first_validation,
                                 round(length * (fractions[0] + fractions[1]))))
    span = (window - 1) * stride + 1 + horizon * stride
    lengths = {"train": first_validation, "validation": first_test - first_validation,
               "test": length - first_test}
    return {split: 0 if n < span else (n - span) // shift + 1
            for split, n in lengths.items()}




@pytest.fixture(scope="module")
def three_series(tmp_path_factory):
    """Gap-free series of different lengths; ``c`` is too short for any window."""
    root = tmp_path_factory.mktemp("ts")
    rng = np.random.default_rng(0)
    lengths = {"a": 150, "b": 203, "c": 12}
    rows = []
    for series_id, n in lengths.items():
        rows += series_rows(series_id, rng.normal(size=n).round(4).tolist())
    rng.shuffle(rows)  # Input order must not matter.
    path = write_jsonl(root / "rows.jsonl", rows)
    out = str(root / "out")
    return path, out, run_job(path, out, *GEOMETRY), lengths


def test_timeseries_job_window_counts_match_formula(three_series):
    _, out, manifest, lengths = three_series
    for split in contract.SPLITS:
        records = read_records(out, manifest, split)
        per_series: dict[str, int] = {}
        for record in records:
            sid = record["series_id"].decode()
            per_series[sid] = per_series.get(sid, 0) + 1
        expected = {sid: expected_counts(n)[split] for sid, n in lengths.items()}
        assert per_series == {sid: c for sid, c in expected.items() if c}, split
        assert manifest["splits"][split]["num_records"] == sum(expected.values())


def test_timeseries_job_rejects_series_shorter_than_a_window(three_series):
    _, out, manifest, lengths = three_series
    with open(os.path.join(out, "errors", "rejected.jsonl")) as f:
        rejected = [json.loads(line) for line in f]
    assert [(r["key"], r["reason"]) for r in rejected] == [("c", "series_too_short")]
    counts = manifest["timeseries"]["counts"]
    assert counts["rows_read"] == sum(lengths.values())
    assert counts["rows_in_short_series"] == lengths["c"]
    assert counts["series"] == 3 and counts["series_too_short"] == 1


def test_timeseries_job_window_and_target_layout(three_series):
    path, out, manifest, _ = three_series
    raw = {}
    with open(path) as f:
        for line in f:
            row = json.loads(line)
            raw[(row["series_id"], str(row["timestamp"]))] = row["value"]
    mean, std = (manifest["normalisation"][k][0] for k in ("mean", "std"))
    record = read_records(out, manifest, "train")[0]
    sid = record["series_id"].decode()
    start = int(record["window_start"].decode())
    window_rows = [raw[(sid, str(start + 2 * i))] for i in range(6)]
    target_rows = [raw[(sid, str(start + 10 + 2 * (i + 1)))] for i in range(3)]
    assert record["window"].shape == (6, 1) and record["target"].shape == (3, 1)
    np.testing.assert_allclose(record["window"][:, 0],
                               (np.array(window_rows) - mean) / std, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(record["target"][:, 0],
                               (np.array(target_rows) - mean) / std, rtol=1e-5, atol=1e-5)
    assert record["key"].decode() == f"{sid}@{start}"
    # Float windows compress (~20 %): the default deflates them, unlike JPEG images.
    assert manifest["preprocessing"]["gzip_level"] == 6


def float64_mean_and_std(values) -> tuple[np.float32, np.float32]:
    """Population mean and std of float32 ``values`` in float64 (math.fsum), as float32."""
    x = np.asarray(values, np.float32).astype(np.float64)
    mean = math.fsum(x) / len(x)
    return np.float32(mean), np.float32(math.sqrt(math.fsum((x - mean) ** 2) / len(x)))


def test_timeseries_job_records_the_train_statistics_exactly_as_float32(three_series):
    # Independent: the first round(0.8 n) rows of a and b by time (c, too short for a
    # window, is rejected whole), parsed as float32, summed in float64.
    path, _, manifest, lengths = three_series
    by_series: dict[str, list[tuple[int, float]]] = {}
    with open(path) as f:
        for line in f:
            row = json.loads(line)
            by_series.setdefault(row["series_id"], []).append((row["timestamp"],
                                                               row["value"]))
    train = [value for sid in ("a", "b")
             for _, value in sorted(by_series[sid])[:round(0.8 * lengths[sid])]]
    mean, std = float64_mean_and_std(train)
    norm = manifest["normalisation"]
    assert norm["per_series"] is False
    assert (np.float32(norm["mean"][0]), np.float32(norm["std"][0])) == (mean, std)
    # JSON holds the float32 values themselves, not a rounding of them.
    assert (norm["mean"][0], norm["std"][0]) == (float(mean), float(std))


def test_timeseries_job_transform_fn_applies_the_recorded_statistics(three_series):
    import tensorflow_transform as tft

    _, out, manifest, _ = three_series
    mean, std = (np.float32(manifest["normalisation"][k][0]) for k in ("mean", "std"))
    values = np.array([mean, mean + std, -3.5, 0.0, 1234.5, np.float32(0.1)], np.float32)
    served = tft.TFTransformOutput(out).transform_raw_features({
        contract.WINDOW_KEY: tf.constant(values.reshape(1, 6, 1)),
        contract.TARGET_KEY: tf.constant(values[:3].reshape(1, 3, 1)),
        contract.SERIES_ID_KEY: tf.constant([b"a"]),
        contract.WINDOW_START_KEY: tf.constant([b"0"]),
        contract.SOURCE_KEY: tf.constant([b"a@0"]),
    })
    window = served[contract.WINDOW_KEY].numpy()[0, :, 0]
    assert window[0] == 0.0  # the recorded mean is the one subtracted
    np.testing.assert_array_equal(window, (values - mean) / std)
    np.testing.assert_array_equal(served[contract.TARGET_KEY].numpy()[0, :, 0],
                                  (values[:3] - mean) / std)


def test_timeseries_job_normaliser_uses_train_rows_only(tmp_path):
    # Train part ~ N(0, 1); the test part sits at 100. Train statistics must ignore it.
    rng = np.random.default_rng(1)
    train_part = rng.normal(size=160)
    values = np.concatenate([train_part, rng.normal(size=20), 100 + rng.normal(size=20)])
    path = write_jsonl(tmp_path / "rows.jsonl", series_rows("s", values.tolist()))
    manifest = run_job(path, str(tmp_path / "out"), "--window_size=8", "--horizon=1")
    norm = manifest["normalisation"]
    assert norm["mean"][0] == pytest.approx(train_part.mean(), abs=1e-4)
    assert norm["std"][0] == pytest.approx(train_part.std(), rel=1e-4)
    test_windows = read_records(str(tmp_path / "out"), manifest, "test")
    assert test_windows and min(r["window"].min() for r in test_windows) > 50


def test_timeseries_job_per_series_normalisation(tmp_path):
    rng = np.random.default_rng(4)
    low, high = rng.normal(size=100), 50 + 3 * rng.normal(size=100)
    rows = series_rows("low", low.tolist()) + series_rows("high", high.tolist())
    path = write_jsonl(tmp_path / "rows.jsonl", rows)
    out = str(tmp_path / "out")
    manifest = run_job(path, out, "--window_size=10", "--horizon=1",
                       "--normalize=per_series")
    assert manifest["normalisation"] == {"per_series": True}
    for record in read_records(out, manifest, "train"):
        # Each series is scaled by its own train rows (first 80): values stay near 0.
        assert np.abs(record["window"]).max() < 5
    train_high = high[:80]
    first = min((r for r in read_records(out, manifest, "train")
                 if r["series_id"] == b"high"), key=lambda r: int(r["window_start"]))
    np.testing.assert_allclose(first["window"][:, 0],
                               (high[:10] - train_high.mean()) / train_high.std(),
                               rtol=1e-4, atol=1e-4)


def test_per_series_lookup_in_job_and_serving_with_unseen_series_fallback(tmp_path):
    # 16 series with distinct levels: every stored window is scaled by its own
    # series' train rows (the first 40 of 50), found by the transform's fingerprint
    # search; at serving time the exported transform_fn does the same, and a series
    # it never saw gets the global train statistics.
    import tensorflow_transform as tft

    rng = np.random.default_rng(7)
    values = {f"s{i:02d}": 10 * i + (1 + i % 3) * rng.normal(size=50) for i in range(16)}
    rows = [row for sid, v in values.items() for row in series_rows(sid, v.tolist())]
    path = write_jsonl(tmp_path / "rows.jsonl", rows)
    out = str(tmp_path / "out")
    manifest = run_job(path, out, "--window_size=5", "--horizon=1", "--normalize=per_series")
    stored = {}
    for split in contract.SPLITS:
        for record in read_records(out, manifest, split):
            sid, start = record["series_id"].decode(), int(record["window_start"])
            train = values[sid][:40]
            np.testing.assert_allclose(
                record["window"][:, 0], (values[sid][start:start + 5] - train.mean())
                / train.std(), rtol=1e-4, atol=1e-4, err_msg=f"{split} {sid} {start}")
            stored[sid, start] = record["window"]
    # Train rows 0-39 give 40 - (5 + 1) + 1 windows per series; the 5-row validation
    # and test parts are shorter than a window, and no window crosses a split.
    assert len(stored) == 16 * 35

    raw_window = values["s03"][:5].astype(np.float32).reshape(1, 5, 1)
    served = tft.TFTransformOutput(out).transform_raw_features({
        "window": tf.constant(np.concatenate([raw_window, raw_window])),
        "target": tf.zeros([2, 1, 1]),
        "series_id": tf.constant([b"s03", b"never-seen"]),
        "window_start": tf.constant([b"0", b"0"]),
        "key": tf.constant([b"a", b"b"]),
    })["window"].numpy()
    np.testing.assert_array_equal(served[0], stored["s03", 0])
    everything = np.concatenate([v[:40] for v in values.values()])
    np.testing.assert_allclose(served[1][:, 0], (raw_window[0, :, 0] - everything.mean())
                               / everything.std(), rtol=1e-4, atol=1e-4)


def test_per_series_analyzer_refuses_fingerprint_clashes(monkeypatch):
    from etl.core.transform import exact_stats
    from etl.timeseries import per_series

    monkeypatch.setattr(per_series, "fingerprint",
                        lambda ids: tf.zeros_like(ids, tf.int64))
    moments = exact_stats.moments_of(np.ones([2, 1], np.float32))
    with pytest.raises(ValueError, match="same 63-bit fingerprint"):
        list(per_series._emit_per_key([(b"a", moments), (b"b", moments)], 1))


def test_timeseries_job_multivariate_columns(tmp_path):
    rows = [{"id": "m", "t": f"2024-01-01T{h:02d}:00:00Z", "x": float(h), "y": -2.0 * h}
            for h in range(24)]
    path = tmp_path / "rows.csv"
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=["id", "t", "x", "y"])
        writer.writeheader()
        writer.writerows(rows)
    manifest = run_job(str(path), str(tmp_path / "out"), "--series_id_column=id",
                       "--timestamp_column=t", "--value_columns=x,y", "--window_size=4",
                       "--horizon=2", "--split_fractions=1,0,0")
    assert manifest["features"]["window"]["shape"] == [4, 2]
    assert manifest["features"]["target"]["shape"] == [2, 2]
    records = read_records(str(tmp_path / "out"), manifest, "train")
    assert len(records) == 24 - 6 + 1
    mean, std = np.array(manifest["normalisation"]["mean"]), manifest["normalisation"]["std"]
    first = min(records, key=lambda r: r["window_start"])
    assert first["window_start"] == b"2024-01-01T00:00:00Z"
    raw = np.array([[h, -2.0 * h] for h in range(4)])
    np.testing.assert_allclose(first["window"], (raw - mean) / np.array(std), atol=1e-5)


def test_timeseries_job_labelled_series_split_by_series(tmp_path):
    rng = np.random.default_rng(2)
    rows, labels = [], []
    for i in range(30):
        sid = f"s{i:02d}"
        label = "up" if i % 3 else "down"
        slope = 1.0 if label == "up" else -1.0
        rows += series_rows(sid, (slope * np.arange(20) + rng.normal(size=20)).tolist())
        labels.append({"series_id": sid, "label": label})
    path = write_jsonl(tmp_path / "rows.jsonl", rows)
    labels_path = write_jsonl(tmp_path / "labels.jsonl", labels)
    out = str(tmp_path / "out")
    # Beam owns --labels too (Dataflow job labels); a file value is the series labels.
    manifest = run_job(path, out, f"--labels={labels_path}", "--window_size=10",
                       "--shift=5")
    assert manifest["task"] == "classification"
    # Ids by sorted name (--class_order's default), though "up" has twice the windows.
    assert manifest["label_vocab"] == sorted({"up", "down"}) == ["down", "up"]
    assert manifest["preprocessing"]["class_order"] == "name"
    seen: dict[str, set[str]] = {}
    for split in contract.SPLITS:
        for record in read_records(out, manifest, split):
            sid = record["series_id"].decode()
            seen.setdefault(sid, set()).add(split)
            assert split == splits.assign_split(sid, splits.SplitFractions())
            name = manifest["label_vocab"][record["label"]]
            assert name == record["label_name"].decode() == ("down" if int(sid[1:]) % 3 == 0
                                                             else "up")
    assert all(len(s) == 1 for s in seen.values()) and len(seen) == 30


@pytest.mark.parametrize("flags, order", [((), "name"),
                                          (("--class_order=frequency",), "frequency")])
def test_timeseries_class_order_reaches_the_preprocessing(tmp_path, flags, order):
    path = write_jsonl(tmp_path / "rows.jsonl", series_rows("a", [1.0] * 12))
    labels = write_jsonl(tmp_path / "labels.jsonl", [{"series_id": "a", "label": "x"}])
    options = timeseries.TimeSeriesOptions(
        [f"--input={path}", f"--output_dir={tmp_path / 'out'}", f"--labels={labels}",
         "--window_size=4", *flags])
    job = timeseries.TimeSeriesJob.from_options(options)
    assert job.preprocessing.class_order == order
    assert job.describe()["class_order"] == order


def test_timeseries_job_rejects_bad_rows_and_reconciles(tmp_path):
    rows = series_rows("r", [float(i) for i in range(30)])
    rows += [{"series_id": "r", "timestamp": "yesterday", "value": 1.0},
             {"series_id": "r", "timestamp": 99, "value": "abc"},
             {"timestamp": 100, "value": 1.0}]
    path = write_jsonl(tmp_path / "rows.jsonl", rows)
    manifest = run_job(path, str(tmp_path / "out"), "--window_size=5")
    assert manifest["rejected"]["by_reason"] == {
        "missing_series_id": 1, "unparsable_timestamp": 1, "unparsable_value": 1}
    counts = manifest["timeseries"]["counts"]
    assert counts["rows_read"] + manifest["rejected"]["count"] == len(rows)
    assert counts["rows_kept"] == 30




def test_timeseries_job_killed_on_two_workers_resumes_byte_identical(three_series,
                                                                     tmp_path):
    # Multi-process mode: a worker freezes after recording its first shard, the job
    # is SIGKILLed, and the rerun (two workers again) keeps what was recorded and
    # publishes exactly the one-worker run's files.
    path, out, manifest, _ = three_series
    other = str(tmp_path / "other")
    workers = ("--direct_num_workers=2", "--direct_running_mode=multi_processing")
    run_until_killed("timeseries", f"--input={path}", f"--output_dir={other}", *GEOMETRY,
                     *workers, point=f"{fault_injection.SHARD_RECORDED}:1")
    recorded = resume.count_recorded_shards(other)
    _, stdout, _ = printing(run_job, path, other, *GEOMETRY, *workers)
    assert output_digests(out) == output_digests(other)
    shards = sum(len(manifest["splits"][split]["shards"]) for split in contract.SPLITS)
    assert 1 <= recorded and (f"resumed: {recorded} shard(s) kept from the interrupted "
                              f"run, {shards - recorded} transformed") in stdout


def test_reader_serves_windows_and_keras_learns_them(tmp_path):
    # A noisy sine: the next value is predictable from the window.
    t = np.arange(600)
    values = np.sin(t / 6.0) + 0.05 * np.random.default_rng(3).normal(size=t.size)
    path = write_jsonl(tmp_path / "rows.jsonl", series_rows("sine", values.tolist()))
    out = str(tmp_path / "out")
    run_job(path, out, "--window_size=12", "--horizon=2")
    train = reader.make_dataset(out, "train", batch_size=32, seed=0)
    windows, targets = next(iter(train))
    assert windows.shape == (32, 12, 1) and targets.shape == (32, 2, 1)
    tf.keras.utils.set_random_seed(0)
    model = tf.keras.Sequential([
        tf.keras.Input((12, 1)), tf.keras.layers.Flatten(), tf.keras.layers.Dense(2),
        tf.keras.layers.Reshape((2, 1))])
    model.compile(optimizer=tf.keras.optimizers.Adam(0.01), loss="mse")
    losses = model.fit(train, epochs=5, verbose=0).history["loss"]
    assert losses[-1] < 0.3 * losses[0], losses
    val = reader.make_dataset(out, "validation", batch_size=32)
    assert model.evaluate(val, verbose=0) < 0.2


# --- exact train statistics -------------------------------------------------------------

def test_timeseries_job_normaliser_statistics_cover_every_train_row_once(tmp_path):
    # Train pieces of 126, 162 and 70 rows (80 % of 157, 203, 88): none a multiple of
    # the window size, so per-window blocks of train rows would leave rows out.
    rng = np.random.default_rng(11)
    lengths = {"a": 157, "b": 203, "c": 88}
    frames = [pd.DataFrame({"series_id": sid, "timestamp": np.arange(n),
                            "value": rng.normal(10 * k, 1 + k, size=n).round(3)})
              for k, (sid, n) in enumerate(lengths.items())]
    rows = pd.concat(frames).sample(frac=1, random_state=0)  # input order must not matter
    path = write_jsonl(tmp_path / "rows.jsonl", rows.to_dict("records"))
    manifest = run_job(path, str(tmp_path / "out"), "--window_size=10", "--horizon=2")
    # Independent derivation: the first round(0.8 n) rows of each series, as float32.
    train = pd.concat([f.head(round(0.8 * len(f))) for f in frames])["value"]
    values = train.to_numpy(np.float32).astype(np.float64)
    norm = manifest["normalisation"]
    assert (np.float32(norm["mean"][0]), np.float32(norm["std"][0])) == (
        float64_mean_and_std(values))
    # The test can tell: whole 10-row blocks of each train piece give other statistics.
    blocks = np.concatenate([f.head(round(0.8 * len(f)))["value"].to_numpy()[
        :round(0.8 * len(f)) // 10 * 10] for f in frames])
    assert abs(blocks.mean() - values.mean()) > 1e-4 * abs(values.mean())


# --- flags ---------------------------------------------------------------------------------

def _hourly(series_id: str, values, start: str = "2024-01-01T00:00:00") -> list[dict]:
    stamps = np.datetime64(start) + np.arange(len(values)) * np.timedelta64(1, "h")
    return [{"series_id": series_id, "timestamp": str(t), "value": v}
            for t, v in zip(np.datetime_as_string(stamps, unit="s"), values, strict=True)]


def _starts(out: str, manifest: dict, split: str) -> list[str]:
    return sorted(r["window_start"].decode() for r in read_records(out, manifest, split))


def test_timeseries_job_split_times_cut_every_series_at_the_same_instants(tmp_path):
    rows = _hourly("a", np.arange(48.0)) + _hourly("b", np.arange(30.0),
                                                   "2024-01-01T10:00:00")
    path = write_jsonl(tmp_path / "rows.jsonl", rows)
    out = str(tmp_path / "out")
    manifest = run_job(path, out, "--window_size=4", "--horizon=1",
                       "--split_times=2024-01-01T20:00:00,2024-01-02T06:00:00")
    # a: hours 0-19 train (20 rows), 20-29 validation (10), 30-47 test (18);
    # b: hours 10-19 (10), 20-29 (10), 30-39 (10). Span 5: n - 4 windows each.
    assert {s: manifest["splits"][s]["num_records"] for s in contract.SPLITS} == {
        "train": 16 + 6, "validation": 6 + 6, "test": 14 + 6}
    first_test = min(_starts(out, manifest, "test"))
    assert first_test == "2024-01-02T06:00:00"
    # The manifest records the rule in effect: the cut-offs as typed, no fractions.
    assert manifest["preprocessing"]["split_times"] == ["2024-01-01T20:00:00",
                                                        "2024-01-02T06:00:00"]
    assert manifest["preprocessing"]["split_fractions"] is None


@pytest.mark.parametrize(("flags", "cleaning"), [
    ((), Cleaning()),
    (("--duplicates=reject",), Cleaning(duplicates="reject")),
    (("--missing=ffill", "--max_gap=none"), Cleaning(missing="ffill", max_gap="none")),
    (("--missing=interpolate",), Cleaning(missing="interpolate")),
    (("--missing=reject", "--max_gap=2.5"), Cleaning(missing="reject", max_gap=2.5)),
])
def test_timeseries_cleaning_flags_reach_the_series_step(tmp_path, flags, cleaning):
    # What each policy does to rows: tests/etl/timeseries/test_buckets.py.
    path = write_jsonl(tmp_path / "rows.jsonl", series_rows("a", [1.0, 2.0]))
    options = runner_defaults.pipeline_options(
        [f"--input={path}", f"--output_dir={tmp_path / 'out'}", "--window_size=4", *flags],
        timeseries.TimeSeriesOptions)
    job = timeseries.TimeSeriesJob.from_options(options.view_as(timeseries.TimeSeriesOptions))
    assert job.settings.cleaning == cleaning


# The same rows in Parquet files, every series spread over every file of a glob, give
# the same shards as one text file: tests/pipelines/test_object_store.py, on gs://.


def test_timeseries_job_refuses_per_series_normalisation_without_time_split(tmp_path):
    path = write_jsonl(tmp_path / "rows.jsonl", series_rows("s", [1.0] * 20))
    with pytest.raises(ValueError, match="--normalize=per_series needs --split_by=time"):
        run_job(path, str(tmp_path / "out"), "--window_size=4", "--normalize=per_series",
                "--split_by=series")
    assert not os.path.exists(tmp_path / "out")


def test_timeseries_job_fails_above_max_error_fraction_without_manifest(tmp_path):
    rows = series_rows("s", [float(i) for i in range(40)])
    rows += [{"series_id": "s", "timestamp": 100 + i, "value": "n/a?"} for i in range(6)]
    path = write_jsonl(tmp_path / "rows.jsonl", rows)
    out = tmp_path / "out"
    with pytest.raises(accounting.TooManyRejectionsError,
                       match=r"6 of 46 rows \(13\.0%\) were rejected, above "
                             r"--max_error_fraction=0\.1"):
        run_job(path, str(out), "--window_size=4")
    assert not (out / contract.MANIFEST_FILENAME).exists()
    failure = json.loads((out / contract.ERRORS_DIRNAME / "failure.json").read_text())
    assert failure["error"] == "TooManyRejectionsError"
    manifest = run_job(path, str(out), "--window_size=4", "--max_error_fraction=0.2")
    assert manifest["rejected"]["by_reason"] == {"unparsable_value": 6}


# --- no silently broken values ---------------------------------------------------------

def test_timeseries_job_values_beyond_float32_are_dead_letters_not_inf(tmp_path):
    rng = np.random.default_rng(8)
    rows = [row for sid in ("a", "b", "c")
            for row in series_rows(sid, rng.normal(size=300).round(3).tolist())]
    rows[17]["value"], rows[450]["value"] = 1e39, "1e308"
    path = write_jsonl(tmp_path / "rows.jsonl", rows)
    out = str(tmp_path / "out")
    manifest = run_job(path, out, "--window_size=8", "--horizon=2")
    assert manifest["rejected"]["by_reason"] == {"value_out_of_range": 2}
    for split in contract.SPLITS:
        for windows, targets in reader.make_dataset(out, split, batch_size=64):
            assert np.isfinite(windows.numpy()).all() and np.isfinite(targets.numpy()).all()


def test_timeseries_job_windows_overflowing_when_normalised_are_dead_letters(tmp_path):
    # Train rows alternate 0 and 1e-30 (std 5e-31); a later 1e10 normalises to ~2e40,
    # beyond float32: every window or target holding it is rejected, nothing else.
    values = [0.0, 1e-30] * 40 + [0.0] * 9 + [1e10] + [0.0] * 10
    path = write_jsonl(tmp_path / "rows.jsonl", series_rows("o", values))
    out = str(tmp_path / "out")
    manifest = run_job(path, out, "--window_size=3", "--horizon=1", "--max_gap=none")
    big = values.index(1e10)  # row 89: validation is rows 80-89, test 90-99
    span, first_validation = 4, 80
    expected = sum(1 for s in range(first_validation, 90 - span + 1)
                   if s <= big < s + span)
    assert manifest["rejected"]["by_reason"] == {"window_out_of_range": expected}
    for split in contract.SPLITS:
        for windows, targets in reader.make_dataset(out, split, batch_size=64):
            assert np.isfinite(windows.numpy()).all() and np.isfinite(targets.numpy()).all()
    assert manifest["splits"]["validation"]["num_records"] == 10 - span + 1 - expected


def test_timeseries_job_explains_a_split_without_windows(tmp_path, capsys):
    # 60 rows per series: validation and test get 6 rows each, fewer than the span 11.
    rng = np.random.default_rng(9)
    rows = [row for sid in ("a", "b") for row in series_rows(sid, rng.normal(size=60).tolist())]
    path = write_jsonl(tmp_path / "rows.jsonl", rows)
    out = str(tmp_path / "out")
    manifest = run_job(path, out, "--window_size=10", "--horizon=1")
    assert manifest["splits"]["validation"]["num_records"] == 0
    reasons = manifest["timeseries"]["empty_splits"]
    assert sorted(reasons) == ["test", "validation"]
    assert "longest piece of a series has 6 rows, fewer than the 11" in reasons["validation"]
    printed = capsys.readouterr().out
    assert f"validation: no windows: {reasons['validation']}" in printed


def test_timeseries_cli_header_only_input_fails_in_one_line(tmp_path):
    path = tmp_path / "rows.csv"
    path.write_text("series_id,timestamp,value\n")
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    result = subprocess.run(
        [sys.executable, "-m", "pipelines.timeseries", f"--input={path}",
         f"--output_dir={tmp_path / 'out'}", "--window_size=4"],
        capture_output=True, text=True, env=env, cwd=REPO_ROOT)
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [(
        "error: The train split is empty: the input has no data rows (a header only, or "
        "empty files). No manifest was published.")]


def test_timeseries_job_spreads_one_long_series_over_shards(tmp_path, monkeypatch):
    # Runs of at most 2 windows (a tiny RUN_BYTES): one series' 45 train windows are
    # 23 runs, which the 3 shards share; every window is stored once, in key order.
    from etl.timeseries import runs as timeseries_runs

    monkeypatch.setattr(timeseries_runs, "RUN_BYTES", 300)
    rng = np.random.default_rng(10)
    path = write_jsonl(tmp_path / "rows.jsonl", series_rows("long", rng.normal(size=60)
                                                            .tolist()))
    out = str(tmp_path / "out")
    manifest = run_job(path, out, "--window_size=4", "--horizon=1", "--num_shards=3",
                       "--split_fractions=1,0,0")
    shards = manifest["splits"]["train"]["shards"]
    assert len(shards) == 3
    keys = []
    for shard in shards:
        dataset = tf.data.TFRecordDataset(os.path.join(out, shard["path"]),
                                          compression_type="GZIP")
        spec = feature_spec_from_json(manifest["features"])
        shard_keys = [tf.io.parse_single_example(r, spec)["key"].numpy().decode()
                      for r in dataset]
        assert shard_keys == sorted(shard_keys, key=placement.shard_sort_key)
        keys += shard_keys
    assert sorted(keys) == sorted(f"long@{s}" for s in range(60 - 5 + 1))


def test_timeseries_job_refuses_append_before_anything_runs(tmp_path):
    # New rows change a series' windows, gaps and time split: a rebuild, not an append.
    path = write_jsonl(tmp_path / "rows.jsonl", series_rows("s", [1.0] * 20))
    with pytest.raises(ValueError, match="a time-series dataset is rebuilt"):
        run_job(path, str(tmp_path / "out"), "--window_size=4", "--append")
    assert not os.path.exists(tmp_path / "out")
