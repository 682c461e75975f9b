"""pipelines/summary.py: the end-of-job summary names what the labels are."""

from __future__ import annotations

import pytest

from pipelines.summary import CoresUsed, format_summary


def _manifest(task: str, features: dict, vocab: list[str]) -> dict:
    empty = {"num_records": 0, "num_bytes": 0, "shards": []}
    return {"name": "images", "kind": "images", "task": task, "features": features,
            "label_vocab": vocab, "splits": {s: empty for s in ("train", "validation",
                                                                "test")},
            "rejected": {"count": 0, "by_reason": {}}}


TARGET = {"target": {"kind": "fixed_len", "dtype": "float32", "shape": [2]}}


@pytest.mark.parametrize("task, features, vocab, line", [
    ("classification", {}, ["a", "b"], "images classification, 2 labels;"),
    ("multi_label", {}, ["a", "b", "c"], "images multi_label, 3 labels;"),
    ("multi_label", TARGET, ["a"], "images multi_label, 1 labels, target shape [2];"),
    ("regression", TARGET, [], "images regression, target shape [2];"),
])
def test_summary_names_the_classes_and_targets(task, features, vocab, line):
    assert line in format_summary("/out", _manifest(task, features, vocab), 1.0)


def test_summary_says_where_the_statistics_are_what_is_flagged_and_what_drifted():
    manifest = _manifest("classification", {}, ["a"])
    manifest["statistics"] = {
        "version": 2, "drift": "statistics/v00002/drift.json",
        "drift_over": [f"train vs v00001/train: f{i}" for i in range(7)],
        "flags": {"file": "statistics/v00002/flags.jsonl", "images": 3,
                  "counts": {"dark": 2, "light": 0, "blurry": 1}},
        "anomalies": [{"split": "train", "description": "ENUM_TYPE_UNEXPECTED_STRING_VALUES"
                                                        ": Examples contain values missing "
                                                        "from the schema: png."}]}
    lines = format_summary("/out", manifest, 1.0).splitlines()
    assert "  statistics: statistics/v00002/ (TFDV format), report: report/index.html" in lines
    assert ("  quality flags: 3 image(s) (dark 2, blurry 1); details in "
            "statistics/v00002/flags.jsonl") in lines
    [drift] = [line for line in lines if line.startswith("WARNING: drift")]
    assert drift.startswith("WARNING: drift over threshold in 7 comparison(s): "
                            "train vs v00001/train: f0; ")
    assert drift.endswith("; and 2 more (details in statistics/v00002/drift.json)")
    assert ("WARNING: train: ENUM_TYPE_UNEXPECTED_STRING_VALUES: Examples contain values "
            "missing from the schema: png.") in lines


def test_summary_of_a_dataset_without_statistics_says_nothing_of_them():
    assert "statistics" not in format_summary("/out", _manifest("classification", {}, ["a"]),
                                              1.0)


def test_summary_says_how_many_cores_the_run_kept_busy():
    cores = CoresUsed(cpu_s=7.5, wall_s=5.0, available=2)
    lines = format_summary("/out", _manifest("classification", {}, ["a"]), 5.0,
                           cores=cores).splitlines()
    assert lines[-2:] == ["  wall time: 5.0 s", (
        "  cores: 1.5 busy on average of the 2 this process may use (7.5 s of CPU in 5.0 s)")]
    assert "cores" not in format_summary("/out", _manifest("classification", {}, ["a"]),
                                         5.0)


def _split(records: int) -> dict:
    return {"num_records": records, "num_bytes": 1024 * 1024,
            "shards": [{}] if records else []}


def test_summary_shows_each_splits_share_next_to_the_share_asked():
    manifest = _manifest("classification", {}, ["a"])
    manifest["splits"] = {"train": _split(146), "validation": _split(20), "test": _split(36)}
    manifest["preprocessing"] = {"split_fractions": {"train": 0.7, "validation": 0.15,
                                                     "test": 0.15}}
    lines = format_summary("/out", manifest, 1.0).splitlines()
    # 146 / 202 = 0.7228, 20 / 202 = 0.0990, 36 / 202 = 0.1782.
    assert lines[1:6] == [
        "  split        records  shards         bytes  share  asked",
        "  train            146       1      1.00 MiB   0.72   0.70",
        "  validation        20       1      1.00 MiB   0.10   0.15",
        "  test              36       1      1.00 MiB   0.18   0.15",
        # An image's split folder or split column wins over the fractions.
        ("  (asked: --split_fractions, for the images that no split folder or split "
         "column placed)")]


def test_summary_asks_no_share_of_splits_cut_by_split_times():
    manifest = _manifest("forecast", {}, [])
    manifest["splits"] = {"train": _split(3), "validation": _split(1), "test": _split(0)}
    manifest["preprocessing"] = {"split_fractions": {"train": 0.8, "validation": 0.1,
                                                     "test": 0.1},
                                 "split_times": ["1990-01-01", "1995-01-01"]}
    lines = format_summary("/out", manifest, 1.0).splitlines()
    assert lines[2:5] == ["  train              3       1      1.00 MiB   0.75      -",
                          "  validation         1       1      1.00 MiB   0.25      -",
                          "  test               0       0      1.00 MiB   0.00      -"]


def test_summary_of_an_empty_dataset_shows_no_share():
    line = format_summary("/out", _manifest("classification", {}, []), 1.0).splitlines()[2]
    assert line == "  train              0       0      0.00 MiB      -      -"


def _series_manifest(counts: dict, cleaning: dict | None = None) -> dict:
    manifest = _manifest("forecast", {}, [])
    manifest.update(kind="timeseries", timeseries={"counts": counts, "empty_splits": {}})
    manifest["preprocessing"] = {"cleaning": cleaning or {
        "duplicates": "mean", "missing": "interpolate", "max_gap": "auto"}}
    return manifest


def test_summary_says_what_the_time_series_cleaning_did():
    manifest = _series_manifest({"rows_read": 100, "rows_kept": 90,
                                 "rows_merged_duplicates": 4, "values_filled": 59,
                                 "rows_dropped_missing": 6, "gaps_split": 2,
                                 "rows_missing_known": 0, "windows_train": 7})
    assert ("  cleaning: 4 row(s) merged as duplicates, 59 value(s) filled "
            "(--missing=interpolate), 6 row(s) dropped for a missing value, 2 cut(s) at "
            "a gap (--max_gap=auto)") in format_summary("/out", manifest, 1.0).splitlines()


def test_summary_says_when_the_time_series_cleaning_did_nothing():
    manifest = _series_manifest({"rows_read": 10, "rows_kept": 10, "gaps_split": 0,
                                 "values_filled": 0})
    assert ("  cleaning: none (no duplicate timestamp, missing value or gap)"
            in format_summary("/out", manifest, 1.0).splitlines())


def test_summary_of_images_has_no_cleaning_line():
    assert "cleaning" not in format_summary("/out", _manifest("classification", {}, ["a"]),
                                            1.0)


def _classes(counts: dict[str, dict[str, int]]) -> dict:
    manifest = _manifest("classification", {}, ["pagoda", "sky"])
    manifest["splits"] = {split: _split(sum(c.values())) for split, c in counts.items()}
    manifest["label_counts"] = counts
    return manifest


def test_summary_warns_of_a_class_with_fewer_than_five_examples_in_a_split():
    manifest = _classes({"train": {"pagoda": 70, "sky": 76},
                         "validation": {"pagoda": 2, "sky": 18},
                         "test": {"pagoda": 5, "sky": 31}})
    warnings = [line for line in format_summary("/out", manifest, 1.0).splitlines()
                if line.startswith("WARNING")]
    assert warnings == [(
        "WARNING: fewer than 5 examples of a class in a split (validation 'pagoda' 2): "
        "metrics of those classes there rest on a handful of examples; give the split "
        "more data (--split_fractions) or merge rare classes.")]


def test_summary_warns_of_a_class_missing_from_a_split_but_not_of_an_empty_split():
    manifest = _classes({"train": {"pagoda": 70, "sky": 76}, "validation": {"sky": 9},
                         "test": {}})
    assert "(validation 'pagoda' 0)" in format_summary("/out", manifest, 1.0)


def test_summary_warns_of_no_class_with_five_examples_everywhere():
    manifest = _classes({"train": {"pagoda": 5, "sky": 5},
                         "validation": {"pagoda": 5, "sky": 5},
                         "test": {"pagoda": 5, "sky": 5}})
    assert "WARNING" not in format_summary("/out", manifest, 1.0)


def test_summary_of_a_forecast_has_no_class_warning():
    manifest = _series_manifest({"rows_read": 1})
    manifest["splits"] = {"train": _split(1), "validation": _split(1), "test": _split(1)}
    assert "WARNING" not in format_summary("/out", manifest, 1.0)
