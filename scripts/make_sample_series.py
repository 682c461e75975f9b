"""Writes the time-series demo's sample: Mauna Loa weekly CO2 (statsmodels' co2 data).

2,284 real weekly measurements, 1958-03-29 to 2001-12-29, 59 of them missing (left
empty in the CSV for the job's --missing policy), shipped inside statsmodels (no
download). Long format: ``series_id,date,co2``.

Usage: python scripts/make_sample_series.py <out.csv>
"""

from __future__ import annotations

import argparse
import csv
import math
import os

from statsmodels.datasets import co2


def write_co2(path: str) -> int:
    """Writes the CSV and returns the number of rows."""
    data = co2.load_pandas().data
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["series_id", "date", "co2"])
        for date, value in zip(data.index, data["co2"], strict=True):
            writer.writerow(["mauna_loa", date.date().isoformat(),
                             "" if math.isnan(value) else f"{value:.1f}"])
    return len(data)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_csv")
    args = parser.parse_args()
    print(f"Wrote {write_co2(args.out_csv)} weekly CO2 rows to {args.out_csv}")


if __name__ == "__main__":
    main()
