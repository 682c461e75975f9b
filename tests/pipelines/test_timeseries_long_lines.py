"""Time-series lines of any length up to ``--max_line_mb``: a long line is read, or
dead-lettered, as a short one is; a longer one stops the job in one line."""

from __future__ import annotations

import json
import logging
import os

import pytest

from pipelines import command, timeseries
from reader.format import contract
from tests.job_runs import run_main
from tests.series_fixtures import run_timeseries_job as run_job

MIB = 1024 * 1024
HEADER = "series_id,timestamp,value"
# Lines 2-121 of every file here: two series of 60 rows.
GOOD = [f"{sid},{t},{(t * 7) % 13 + 0.5}" for sid in ("a", "b") for t in range(60)]
# The statistics pass costs each run a second; nothing here depends on it.
FLAGS = ("--window_size=4", "--statistics=off")


def _write_csv(path, extra: list[str]) -> str:
    path.write_text("\n".join([HEADER, *GOOD, *extra]) + "\n")
    return str(path)


def _cut(message: str) -> str:
    return f"{message[:1000]}... ({len(message)} characters)"


def test_timeseries_job_dead_letters_long_lines_as_a_short_one(tmp_path):
    # A 3 MB value (pyarrow reads blocks of 1 MiB) and a line exactly --max_line_mb
    # long are unparsable values, as the short one is; every good row is kept.
    long_value = "x" * 3_000_000
    at_limit = "b,902," + "y" * (4 * MIB - len("b,902,"))
    path = _write_csv(tmp_path / "long.csv", ["b,900,xyz", f"b,901,{long_value}", at_limit])
    out = str(tmp_path / "out")
    manifest = run_job(path, out, *FLAGS, "--max_line_mb=4")

    assert manifest["inputs"] == 123 and manifest["timeseries"]["counts"]["rows_kept"] == 120
    assert manifest["rejected"]["by_reason"] == {"unparsable_value": 3}
    with open(os.path.join(out, contract.ERRORS_DIRNAME, contract.REJECTED_FILENAME)) as f:
        rejected = [json.loads(line) for line in f]
    prefix = "Column 'value': could not convert string to float: "
    assert [(r["key"], r["source"], r["reason"], r["message"]) for r in rejected] == [
        ("b@900", f"{path}:122", "unparsable_value", f"{prefix}'xyz'"),
        ("b@901", f"{path}:123", "unparsable_value", _cut(f"{prefix}{long_value!r}")),
        ("b@902", f"{path}:124", "unparsable_value",
         _cut(f"{prefix}{at_limit[6:]!r}"))]
    # 48 / 6 / 6 rows of each series by time: 44 / 2 / 2 windows of 4 rows and 1.
    assert {split: manifest["splits"][split]["num_records"]
            for split in contract.SPLITS} == {"train": 88, "validation": 4, "test": 4}


@pytest.mark.parametrize("suffix", ["csv", "jsonl"])
def test_timeseries_job_stops_in_one_line_at_a_line_over_max_line_mb(
        tmp_path, monkeypatch, root_logging, capfd, suffix):
    path = tmp_path / f"rows.{suffix}"
    if suffix == "csv":
        path.write_text("\n".join([HEADER, *GOOD[:30], "a,900," + "x" * (2 * MIB),
                                   *GOOD[30:]]) + "\n")
        line = 32
    else:
        rows = [json.dumps({"series_id": "a", "timestamp": t, "value": 1.0})
                for t in range(30)]
        rows.append(json.dumps({"series_id": "a", "timestamp": 900, "value": "x" * 2 * MIB}))
        path.write_text("\n".join(rows) + "\n")
        line = 31
    out = tmp_path / "out"
    exit_error = run_main(monkeypatch, timeseries.run, [
        f"--input={path}", f"--output_dir={out}", *FLAGS, "--max_line_mb=1"])
    assert exit_error.code == (
        f"error: Line {line} of {str(path)!r} is longer than --max_line_mb=1 (1048576 "
        f"bytes): raise --max_line_mb (at most 1024) to read it.")
    assert command.exit_status(exit_error.code) == 1  # prints the line, as python does
    assert capfd.readouterr().err.splitlines() == [exit_error.code]  # no traceback
    assert not out.exists()


@pytest.mark.parametrize("value", ["0", "1025"])
def test_timeseries_job_refuses_max_line_mb_out_of_range(tmp_path, monkeypatch,
                                                         root_logging, value):
    path = _write_csv(tmp_path / "rows.csv", [])
    exit_error = run_main(monkeypatch, timeseries.run, [
        f"--input={path}", f"--output_dir={tmp_path / 'out'}", *FLAGS,
        f"--max_line_mb={value}"])
    assert exit_error.code == (f"error: --max_line_mb must be above 0 and at most 1024, "
                               f"got {value}.")


def test_timeseries_job_on_gcs_stops_in_one_line_at_a_line_over_max_line_mb(
        tmp_path, monkeypatch, root_logging, caplog, capfd, gcs_bucket):
    # On an object store no line is probed before the run: the read step finds it,
    # on a worker, and the job still ends in its one line: the traceback Beam logs
    # for it is held back.
    from etl.core.io import storage

    path = f"{gcs_bucket.url}/rows.csv"
    storage.write_text(path, "\n".join([HEADER, *GOOD[:30], "a,900," + "x" * (2 * MIB),
                                        *GOOD[30:]]) + "\n")
    exit_error = run_main(monkeypatch, timeseries.run, [
        f"--input={path}", f"--output_dir={tmp_path / 'out'}", *FLAGS, "--max_line_mb=1"])
    assert exit_error.code.startswith(
        f"error: Line 32 of {path!r} is longer than --max_line_mb=1 (1048576 bytes): "
        f"raise --max_line_mb (at most 1024) to read it."), exit_error.code
    assert not [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR]
    assert "Traceback" not in capfd.readouterr().err
