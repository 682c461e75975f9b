"""Calendar features in the graph against pandas' calendar, over every day of 1899-2101."""

import numpy as np
import pandas as pd
import pytest

from etl.timeseries import calendar


def _pandas_reference(stamps: pd.DatetimeIndex) -> dict[str, np.ndarray]:
    return {"day_of_week": stamps.dayofweek.to_numpy(), "month": stamps.month.to_numpy(),
            "day_of_month": stamps.day.to_numpy(), "day_of_year": stamps.dayofyear.to_numpy(),
            "week_of_year": stamps.isocalendar().week.to_numpy().astype(np.int64),
            "hour": stamps.hour.to_numpy()}


def test_every_day_and_hour_matches_pandas():
    # Leap years, century years (1900 and 2100 are not leap, 2000 is), ISO weeks 53
    # and week 1 in late December, dates before the epoch.
    days = pd.date_range("1899-12-25", "2101-01-07", freq="D", tz="UTC")
    stamps = days + pd.to_timedelta(np.arange(len(days)) % 24 * 3600 + 59, unit="s")
    seconds = (stamps - pd.Timestamp(0, tz="UTC")) // pd.Timedelta(seconds=1)
    got = {k: v.numpy() for k, v in calendar.calendar_values(seconds.to_numpy()).items()}
    expected = _pandas_reference(stamps)
    for name in calendar.FEATURES:
        np.testing.assert_array_equal(got[name], expected[name], err_msg=name)


@pytest.mark.parametrize("name, value, channel", [
    ("day_of_week", "2024-01-07", 0.5),  # a Sunday: the last day
    ("day_of_week", "2024-01-01", -0.5),  # a Monday
    ("month", "2024-12-31", 0.5),
    ("day_of_month", "2024-03-31", 0.5),
    ("day_of_year", "2024-12-31", (366 - 1) / 365 - 0.5),
    ("week_of_year", "2020-12-31", 0.5),  # ISO week 53
    ("hour", "2024-01-01T23:00:00", 0.5),
])
def test_channels_are_scaled_like_gluonts(name, value, channel):
    seconds = pd.Timestamp(value, tz="UTC").value // 10**9
    got = calendar.calendar_features(np.array([seconds]), (name,)).numpy()
    assert got.shape == (1, 1) and got.dtype == np.float32
    assert got[0, 0] == pytest.approx(channel, abs=1e-6)
