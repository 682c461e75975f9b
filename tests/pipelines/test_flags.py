"""Flags: one that neither the job nor Beam knows stops the job before it writes
anything; the shared ones reach the job's settings."""

from __future__ import annotations

import json

import pytest

from pipelines import flags, images, timeseries
from pipelines.common import OutputSettings
from pipelines.images import ImagesOptions
from tests.job_runs import run_main


@pytest.fixture()
def series_rows(tmp_path) -> str:
    """A valid time-series input: the job would run on it."""
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps({"series_id": "a", "timestamp": t, "value": t}) + "\n"
                            for t in range(12)))
    return str(path)


def test_images_misspelled_flag_exits_naming_flag_and_suggestion(
        image_folder, tmp_path, monkeypatch, root_logging):
    root, _, _ = image_folder
    out = tmp_path / "out"
    exit_error = run_main(monkeypatch, images.run,
                          [f"--input={root}", f"--output_dir={out}", "--imag_size=64"])
    # A string exit code: the interpreter prints it and exits with status 1.
    assert exit_error.code == ("error: Unknown argument --imag_size (did you mean "
                               "--image_size?); see --help for this job's flags.")
    assert not out.exists()


def test_timeseries_misspelled_flag_exits_naming_flag_and_suggestion(
        series_rows, tmp_path, monkeypatch, root_logging):
    out = tmp_path / "out"
    exit_error = run_main(monkeypatch, timeseries.run,
                          [f"--input={series_rows}", f"--output_dir={out}",
                           "--window_size=3", "--num_shard=3"])
    assert exit_error.code == ("error: Unknown argument --num_shard (did you mean "
                               "--num_shards?); see --help for this job's flags.")
    assert not out.exists()


def test_check_known_flags_accepts_beam_flags():
    flags.check_known_flags(
        ["--input=in", "--image_size=64", "--runner=DirectRunner", "--direct_num_workers=2",
         "--direct_running_mode=multi_processing", "--labels=team=data"],
        images.ImagesOptions)


def test_check_known_flags_refuses_another_jobs_flag():
    # TimeSeriesOptions is loaded in this process, yet its flags are not the image job's.
    with pytest.raises(ValueError, match=r"^Unknown argument --window_size\b"):
        flags.check_known_flags(["--window_size=3"], images.ImagesOptions)


def test_check_known_flags_names_flag_not_its_separate_value():
    with pytest.raises(ValueError) as info:
        flags.check_known_flags(["--imag_size", "64"], images.ImagesOptions)
    assert str(info.value) == ("Unknown argument --imag_size (did you mean "
                               "--image_size?); see --help for this job's flags.")


def test_check_known_flags_refuses_stray_positional_argument():
    with pytest.raises(ValueError) as info:
        flags.check_known_flags(["--image_size=64", "64"], images.ImagesOptions)
    assert str(info.value) == ("Unknown argument '64' (not a flag); see --help for this "
                               "job's flags.")


def test_check_known_flags_lists_every_unknown_flag():
    with pytest.raises(ValueError) as info:
        flags.check_known_flags(["--num_shard=3", "--jpeg_qualty=90"],
                                images.ImagesOptions)
    assert str(info.value) == ("Unknown arguments --num_shard (did you mean --num_shards?), "
                               "--jpeg_qualty (did you mean --jpeg_quality?); see --help "
                               "for this job's flags.")


@pytest.mark.parametrize("argv, resume", [([], True), (["--no_resume"], False)])
def test_runs_resume_unless_no_resume(argv, resume):
    options = ImagesOptions(["--output_dir=out", *argv])
    assert OutputSettings.from_options(options, default_name="images").resume is resume


@pytest.mark.parametrize("argv, compression, level", [
    ([], "gzip", 6), (["--gzip_level=1"], "gzip", 1), (["--compression=none"], "none", None)])
def test_compression_and_gzip_level_reach_the_manifest(argv, compression, level):
    options = ImagesOptions(["--output_dir=out", *argv])
    settings = OutputSettings.from_options(options, default_name="images")
    described = settings.describe()
    assert (settings.shard_format.compression, described["compression"],
            described["gzip_level"]) == (compression, compression, level)


def test_a_gzip_level_without_gzip_is_one_clear_error():
    options = ImagesOptions(["--output_dir=out", "--compression=none", "--gzip_level=6"])
    with pytest.raises(ValueError, match="--gzip_level=6 needs --compression=gzip"):
        OutputSettings.from_options(options, default_name="images")
