"""Long-format series rows written in ``tmp_path`` and the time-series job run on them."""

from __future__ import annotations

import csv
import json
import os

GEOMETRY = ("--window_size=6", "--shift=2", "--stride=2", "--horizon=3")


def write_jsonl(path, rows) -> str:
    """Writes ``rows`` (dicts) as JSON Lines; returns the path as a string."""
    with open(path, "w") as f:
        f.writelines(json.dumps(row) + "\n" for row in rows)
    return str(path)


def write_small_series_csv(path: str) -> str:
    """A long-format CSV (series_id,timestamp,value) of three series of 60, 45 and 33
    rows: the small series input of the sdist check and the cluster rounds."""
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["series_id", "timestamp", "value"])
        for series, length in (("a", 60), ("b", 45), ("c", 33)):
            writer.writerows((series, t, round((t * 7919 % 101) / 10.0, 1))
                             for t in range(length))
    return path


def series_rows(series_id: str, values, start: int = 0, step: int = 1,
                column: str = "value") -> list[dict]:
    """One series' rows with numeric timestamps ``start, start + step, ...``."""
    return [{"series_id": series_id, "timestamp": start + i * step, column: v}
            for i, v in enumerate(values)]


def run_timeseries_job(input_path: str, out: str, *flags: str) -> dict:
    """Runs ``python -m pipelines.timeseries`` in-process; returns the manifest."""
    from pipelines import timeseries

    return timeseries.run([f"--input={input_path}", f"--output_dir={out}", *flags])
