"""The time-series job on dates that are not ISO 8601: ``--timestamp_format``, and the
early stop when a file's first rows are all rejected for one reason."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from pipelines import testing, timeseries
from tests.job_runs import run_main

FLAGS = ("--timestamp_column=date", "--window_size=4", "--horizon=2",
         "--missing=interpolate", "--statistics=off")
US = "%m/%d/%Y"


def _frame() -> pd.DataFrame:
    """Two monthly series (one with a missing value), ISO dates."""
    rng = np.random.default_rng(7)
    frames = []
    for series_id, n in (("a", 40), ("b", 33)):
        dates = pd.date_range("1959-01-01", periods=n, freq="MS")
        values = rng.normal(10, 3, n).round(3).astype(object)
        values[5] = ""
        frames.append(pd.DataFrame({"series_id": series_id,
                                    "date": dates.strftime("%Y-%m-%d"), "value": values}))
    return pd.concat(frames, ignore_index=True)


def _us_date(iso: str) -> str:
    return pd.Timestamp(iso).strftime(US)


def _expected_windows(rows: pd.DataFrame, fractions=(0.6, 0.2, 0.2), window=4,
                      horizon=2) -> tuple[dict[str, tuple[str, np.ndarray, np.ndarray]],
                                          float, float]:
    """The windows pandas cuts from ``rows`` (ISO dates): ``(key with the US date →
    (split, window, target) raw), train mean, train population std``. Each series is
    sorted, its missing value interpolated in time, its rows split in time order by
    ``fractions`` (boundaries rounded), then cut into windows inside each split."""
    windows, train = {}, []
    for series_id, group in rows.groupby("series_id"):
        values = pd.Series(pd.to_numeric(group["value"], errors="coerce").to_numpy(),
                           index=pd.to_datetime(group["date"])).sort_index()
        values = values.interpolate(method="time")
        n = len(values)
        cuts = [0, round(n * fractions[0]), round(n * (fractions[0] + fractions[1])), n]
        for split, a, b in zip(("train", "validation", "test"), cuts[:-1], cuts[1:],
                               strict=True):
            part = values.iloc[a:b]
            train += list(part.to_numpy()) if split == "train" else []
            for i in range(len(part) - window - horizon + 1):
                windows[f"{series_id}@{part.index[i].strftime(US)}"] = (
                    split, part.to_numpy()[i:i + window],
                    part.to_numpy()[i + window:i + window + horizon])
    return windows, float(np.mean(train)), float(np.std(train))


def test_timeseries_job_us_dates_with_timestamp_format_give_pandas_windows(tmp_path):
    rows = _frame()
    # Three rows keep their ISO dates: not in --timestamp_format, so dead letters, and
    # the job runs (the first rows are not all rejected).
    bad = [3, 20, 50]
    written_rows = rows.assign(date=rows["date"].map(_us_date))
    written_rows.loc[bad, "date"] = rows.loc[bad, "date"]
    path = tmp_path / "us.csv"
    written_rows.to_csv(path, index=False)
    result = testing.run_timeseries_job(path, tmp_path / "out", *FLAGS, "--max_gap=none",
                                        "--split_fractions=0.6,0.2,0.2",
                                        f"--timestamp_format={US}")
    manifest = result.manifest
    assert manifest["preprocessing"]["timestamp_format"] == US
    assert result.rejected_reasons == {
        f"{rows.at[i, 'series_id']}@{rows.at[i, 'date']}": "unparsable_timestamp"
        for i in bad}
    assert manifest["inputs"] == len(rows)
    assert manifest["timeseries"]["parse_rejected"] == len(bad)
    assert manifest["timeseries"]["counts"]["rows_read"] == len(rows) - len(bad)
    expected, mean, std = _expected_windows(rows.drop(index=bad))
    np.testing.assert_allclose(manifest["normalisation"]["mean"], [mean], rtol=1e-6)
    np.testing.assert_allclose(manifest["normalisation"]["std"], [std], rtol=1e-6)
    written = {r["key"]: (split, r) for split in ("train", "validation", "test")
               for r in result.records(split)}
    assert sorted(written) == sorted(expected)
    for key, (split, window, target) in expected.items():
        got_split, record = written[key]
        assert (got_split, record["window_start"]) == (split, key.split("@")[1])
        np.testing.assert_allclose(np.ravel(record["window"]), (window - mean) / std,
                                   rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(np.ravel(record["target"]), (target - mean) / std,
                                   rtol=1e-5, atol=1e-5)


def test_timeseries_job_us_dates_stop_early_in_one_line_writing_nothing(
        tmp_path, monkeypatch, root_logging):
    rows = _frame()
    path = tmp_path / "us.csv"
    rows.assign(date=rows["date"].map(_us_date)).to_csv(path, index=False)
    out = tmp_path / "out"
    exit_error = run_main(monkeypatch, timeseries.run, [
        f"--input={path}", f"--output_dir={out}", *FLAGS])
    assert exit_error.code == (
        f"error: timestamps like '01/01/1959' are not ISO 8601 (nor numbers); pass "
        f"--timestamp_format=%m/%d/%Y (the first {len(rows)} row(s) of {str(path)!r} "
        f"were all rejected as unparsable_timestamp; nothing was run or written).")
    assert not out.exists()


def test_timeseries_job_early_stop_leaves_an_existing_folder_as_it_was(
        tmp_path, monkeypatch, root_logging):
    path = tmp_path / "us.csv"
    path.write_text("series_id,date,value\na,01/31/1959,1\na,02/28/1959,2\n")
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    exit_error = run_main(monkeypatch, timeseries.run, [
        f"--input={path}", f"--output_dir={out}", *FLAGS, "--overwrite"])
    assert exit_error.code.startswith("error: timestamps like '01/31/1959' are not ISO "
                                      "8601 (nor numbers); pass --timestamp_format=%m/%d/%Y")
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt"]


@pytest.mark.parametrize(("date", "flags", "expected"), [
    (lambda iso: iso, (), None),
    (_us_date, (f"--timestamp_format={US}",), US),
])
def test_timeseries_options_timestamp_format_reaches_the_columns(tmp_path, date, flags,
                                                                 expected):
    rows = _frame()
    path = tmp_path / "rows.csv"
    rows.assign(date=rows["date"].map(date)).to_csv(path, index=False)
    options = timeseries.TimeSeriesOptions(
        [f"--input={path}", f"--output_dir={tmp_path / 'out'}", *FLAGS, *flags])
    job = timeseries.TimeSeriesJob.from_options(options)
    assert job.columns.timestamp_format == expected
    assert job.describe()["timestamp_format"] == expected


@pytest.mark.parametrize("cutoffs", ["03/01/1960,06/01/1960", "1960-03-01,1960-06-01"])
def test_split_times_are_read_as_the_data_s_format_or_iso(tmp_path, cutoffs):
    options = timeseries.TimeSeriesOptions(
        [f"--input={tmp_path / 'rows.csv'}", f"--timestamp_format={US}",
         f"--split_times={cutoffs}"])
    split = timeseries.time_split(options, "time", None)
    expected = [pd.Timestamp(day, tz="UTC").timestamp() for day in ("1960-03-01",
                                                                    "1960-06-01")]
    assert list(split.cutoffs) == expected
    assert list(split.cutoff_texts) == cutoffs.split(",")


def test_split_times_in_neither_format_name_both(tmp_path):
    options = timeseries.TimeSeriesOptions(
        [f"--timestamp_format={US}", "--split_times=1960.03.01,1960.06.01"])
    with pytest.raises(ValueError, match=r"--split_times: '1960.03.01' is not ISO 8601 nor "
                                         r"--timestamp_format=%m/%d/%Y"):
        timeseries.time_split(options, "time", None)
