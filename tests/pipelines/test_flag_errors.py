"""Option errors name the flag the user typed and what to pass; conflicting flags are
refused in one ``error:`` line; the manifest records the split rule in effect."""

from __future__ import annotations

import json
import subprocess

import pytest

from pipelines import runner_defaults, timeseries
from tests.job_commands import REPO_ROOT, job_command
from tests.job_runs import run_main

SPLIT_TIMES = "--split_times=2024-01-01T20:00:00,2024-01-02T06:00:00"


@pytest.fixture()
def rows(tmp_path) -> str:
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(
        json.dumps({"series_id": "a", "timestamp": f"2024-01-0{1 + t // 24}T{t % 24:02}:00:00",
                    "sales": t, "price": 1.0}) + "\n" for t in range(40)))
    return str(path)


def _job(rows: str, tmp_path, *flags: str) -> timeseries.TimeSeriesJob:
    options = runner_defaults.pipeline_options(
        [f"--input={rows}", f"--output_dir={tmp_path / 'out'}", "--window_size=3", *flags],
        timeseries.TimeSeriesOptions)
    return timeseries.TimeSeriesJob.from_options(
        options.view_as(timeseries.TimeSeriesOptions))


def test_split_times_with_split_fractions_is_refused_naming_both(rows, tmp_path):
    with pytest.raises(ValueError) as error:
        _job(rows, tmp_path, "--value_columns=sales", SPLIT_TIMES,
             "--split_fractions=0.8,0.1,0.1")
    assert str(error.value) == (
        "--split_times=2024-01-01T20:00:00,2024-01-02T06:00:00 and "
        "--split_fractions=0.8,0.1,0.1 both set the splits: pass one of them.")


def test_split_times_alone_are_recorded_as_typed_without_fractions(rows, tmp_path):
    described = _job(rows, tmp_path, "--value_columns=sales", SPLIT_TIMES).describe()
    assert described["split_times"] == ["2024-01-01T20:00:00", "2024-01-02T06:00:00"]
    assert described["split_fractions"] is None


def test_split_fractions_alone_are_recorded_without_times(rows, tmp_path):
    described = _job(rows, tmp_path, "--value_columns=sales",
                     "--split_fractions=0.6,0.2,0.2").describe()
    assert described["split_fractions"] == {"train": 0.6, "validation": 0.2, "test": 0.2}
    assert described["split_times"] is None


def test_a_column_in_two_roles_names_the_alias_the_user_typed(rows, tmp_path):
    with pytest.raises(ValueError) as error:
        _job(rows, tmp_path, "--value_columns=sales,price", "--known_columns=price")
    assert str(error.value) == ("Column 'price' is in both --value_columns and "
                                "--known_columns; give each column one role.")


def test_value_columns_with_target_columns_is_refused(rows, tmp_path):
    with pytest.raises(ValueError) as error:
        _job(rows, tmp_path, "--value_columns=sales", "--target_columns=price")
    assert str(error.value) == ("--value_columns=sales and --target_columns=price both "
                                "name the columns to predict: pass one of them.")


def test_a_missing_value_column_names_its_flag_and_the_closest_column(tmp_path):
    # A CSV's header is checked before the job runs (JSON Lines rows, as they are read).
    path = tmp_path / "rows.csv"
    path.write_text("series_id,timestamp,sales,price\na,1,2.0,3.0\n")
    with pytest.raises(ValueError, match=r"lacks column\(s\) \['prices'\]; .*: pass "
                                         r"--known_columns=price \("):
        _job(str(path), tmp_path, "--value_columns=sales", "--known_columns=prices")


def test_conflicting_split_flags_end_the_command_in_one_error_line(
        rows, tmp_path, monkeypatch, root_logging):
    out = tmp_path / "out"
    stop = run_main(monkeypatch, timeseries.run,
                    [f"--input={rows}", f"--output_dir={out}", "--window_size=3",
                     "--value_columns=sales", SPLIT_TIMES, "--split_fractions=0.7,0.2,0.1"])
    assert stop.code == ("error: --split_times=2024-01-01T20:00:00,2024-01-02T06:00:00 and "
                         "--split_fractions=0.7,0.2,0.1 both set the splits: pass one of "
                         "them.")
    assert not out.exists()


def test_image_manifest_without_its_label_column_ends_in_one_error_line(tmp_path):
    # The command itself: one "error:" line, the prefix both jobs print, status 1.
    manifest = tmp_path / "manifest.csv"
    manifest.write_text("path,class\na.png,cat\n")
    result = subprocess.run(
        job_command("images", f"--input={manifest}", f"--output_dir={tmp_path / 'out'}"),
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 1
    assert result.stderr.splitlines()[-1] == (
        f"error: Manifest {str(manifest)!r} lacks column(s) ['label']; its header is "
        f"['path', 'class']: pass --label_column=class (the closest column no other flag "
        f"names). Required: 'path', 'label'; optional: 'split'.")
