"""Long-format series rows written in ``tmp_path`` and the time-series job run on them."""

from __future__ import annotations

import json

GEOMETRY = ("--window_size=6", "--shift=2", "--stride=2", "--horizon=3")


def write_jsonl(path, rows) -> str:
    """Writes ``rows`` (dicts) as JSON Lines; returns the path as a string."""
    with open(path, "w") as f:
        f.writelines(json.dumps(row) + "\n" for row in rows)
    return str(path)


def write_small_series_csv(path: str) -> str:
    """A long-format CSV (series_id,timestamp,value) of three series of 60, 45 and 33
    rows (``etl.testing.write_series``' default): the small series input of the sdist
    check and the cluster rounds."""
    from etl import testing

    testing.write_series(path, (60, 45, 33))
    return path


def series_rows(series_id: str, values, start: int = 0, step: int = 1,
                column: str = "value") -> list[dict]:
    """One series' rows with numeric timestamps ``start, start + step, ...``."""
    return [{"series_id": series_id, "timestamp": start + i * step, column: v}
            for i, v in enumerate(values)]


def run_timeseries_job(input_path: str, out: str, *flags: str) -> dict:
    """Runs ``python -m pipelines.timeseries`` in-process
    (``etl.testing.run_timeseries_job``, printing what the job prints); returns the
    manifest."""
    from etl import testing

    return testing.run_timeseries_job(input_path, out, *flags, quiet=False).manifest
