"""Long-format series rows written in ``tmp_path`` and the time-series job run on them."""

from __future__ import annotations

import json
from collections.abc import Iterable

import numpy as np

from etl.timeseries.rows.sources import DATETIME, Row
from etl.timeseries.rows.time_texts import DATETIME_BIT, NUMERIC_BIT, TimeTexts
from etl.timeseries.series import Cleaning, CleanSeries, SeriesRows, clean_rows

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
    from pipelines import testing

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
    from pipelines import testing

    return testing.run_timeseries_job(input_path, out, *flags, quiet=False).manifest


def clean_series(series_id: str, rows: Iterable[Row], cleaning: Cleaning) -> CleanSeries:
    """``etl.timeseries.series.clean_rows`` of ``Row`` objects: the job reads rows as
    columns, a test writes them one by one. Their order is the input order, and a
    dead letter names a row by its ``source``."""
    rows = list(rows)
    kinds = 0
    for row in rows:
        kinds |= DATETIME_BIT if row.time_kind == DATETIME else NUMERIC_BIT
    num_features = len(rows[0].values) if rows else 1
    columns = SeriesRows(
        times=np.array([r.time for r in rows], np.float64),
        values=np.array([r.values for r in rows], np.float64).reshape(len(rows), num_features),
        positions=np.arange(len(rows), dtype=np.int64),
        texts=TimeTexts.stored([r.time_text for r in rows]), kinds=kinds)
    return clean_rows(series_id, columns, cleaning, lambda position: rows[position].source)
