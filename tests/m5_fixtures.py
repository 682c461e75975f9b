"""M5-shaped retail data: items × stores × days, as the forecasting tests use it.

One row per (item, store, day): ``sales`` (a count, the target), ``price`` and
``promo`` (known in advance), ``visits`` (observed only: a past covariate),
``event`` (a category), ``store_size`` and ``item_weight`` (constant per series),
``store_id`` and ``item_id``. Sales follow the price, the promotion and the day of
the week, so a model that sees the known covariates over the horizon can beat a
seasonal-naive forecast.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

EVENTS = ("none", "sport", "holiday", "culture")


def m5_frame(items: int, stores: int, days: int, seed: int = 0,
             start: str = "2015-01-05") -> pd.DataFrame:
    """The rows, in (series, day) order; ``series_id`` is ``<item>_<store>``."""
    rng = np.random.default_rng(seed)
    dates = pd.date_range(start, periods=days, freq="D")
    weekday = dates.dayofweek.to_numpy()
    event_of_day = rng.choice(len(EVENTS), size=days, p=[0.85, 0.05, 0.05, 0.05])
    frames = []
    for store in range(stores):
        store_size = float(100 + 37 * store)
        for item in range(items):
            base_price = round(float(rng.uniform(1, 10)), 2)
            promo = (rng.random(days) < 0.1).astype(np.float64)
            price = np.round(base_price * (1 - 0.25 * promo), 2)
            level = rng.uniform(2, 20) * (1 + 0.3 * (weekday >= 5))
            expected = level * (1 + 1.5 * promo) * (base_price / price) ** 0.5
            sales = rng.poisson(expected).astype(np.float64)
            frames.append(pd.DataFrame({
                "series_id": f"item{item}_store{store}", "item_id": f"item{item}",
                "store_id": f"store{store}", "date": dates.strftime("%Y-%m-%d"),
                "sales": sales, "price": price, "promo": promo,
                "visits": np.round(expected * 10 + rng.normal(0, 1, days), 1),
                "event": np.array(EVENTS)[event_of_day],
                "store_size": store_size, "item_weight": round(0.1 * (item + 1), 1),
            }))
    return pd.concat(frames, ignore_index=True)


def write_m5_csv(path: str, frame: pd.DataFrame) -> str:
    frame.to_csv(path, index=False)
    return path
