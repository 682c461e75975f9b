"""Calendar features of timestamps, computed in the transform graph.

Each feature is one channel scaled into ``[-0.5, 0.5]`` as GluonTS's time features are
(``gluonts.time_feature``), so a model can take it as is, beside z-scored covariates:

==============  =======================================  ==========================
feature         value                                    channel
==============  =======================================  ==========================
day_of_week     Monday 0 … Sunday 6                      ``v / 6 - 0.5``
month           1 … 12                                   ``(v - 1) / 11 - 0.5``
day_of_month    1 … 31                                   ``(v - 1) / 30 - 0.5``
day_of_year     1 … 366                                  ``(v - 1) / 365 - 0.5``
week_of_year    ISO 8601 week, 1 … 53                    ``(v - 1) / 52 - 0.5``
hour            0 … 23                                   ``v / 23 - 0.5``
==============  =======================================  ==========================

Timestamps are whole seconds since the epoch in UTC (a timestamp with an offset is
taken at its UTC instant, as the job parses it). The graph computes the civil date
with integer arithmetic (H. Hinnant's ``civil_from_days``), so the stored features
and ``transform_fn`` at serving time are the same function of the raw timestamps.
"""

from __future__ import annotations

from typing import Any

FEATURES = ("day_of_week", "month", "day_of_month", "day_of_year", "week_of_year", "hour")
_SCALE = {"day_of_week": (0, 6), "month": (1, 11), "day_of_month": (1, 30),
          "day_of_year": (1, 365), "week_of_year": (1, 52), "hour": (0, 23)}
_SECONDS_PER_DAY = 86400


def _days_from_civil_jan1(tf: Any, year: Any) -> Any:
    """Days since 1970-01-01 of January 1st of ``year``."""
    y = year - 1  # January counts in the previous March-based year.
    era = tf.math.floordiv(y, 400)
    yoe = y - era * 400
    doe = yoe * 365 + yoe // 4 - yoe // 100 + 306  # 306: March 1st to January 1st
    return era * 146097 + doe - 719468


def _iso_weeks_in_year(tf: Any, year: Any) -> Any:
    """52 or 53: a year has 53 ISO weeks when it starts on a Thursday, or on a
    Wednesday in a leap year."""
    def p(y: Any) -> Any:
        return tf.math.floormod(y + tf.math.floordiv(y, 4) - tf.math.floordiv(y, 100)
                                + tf.math.floordiv(y, 400), 7)
    long_year = tf.equal(p(year), 4) | tf.equal(p(year - 1), 3)
    return tf.where(long_year, tf.constant(53, tf.int64), tf.constant(52, tf.int64))


def calendar_values(seconds: Any) -> dict[str, Any]:
    """Every feature's integer value (``int64``, the shape of ``seconds``)."""
    import tensorflow as tf

    seconds = tf.cast(seconds, tf.int64)
    days = tf.math.floordiv(seconds, _SECONDS_PER_DAY)
    hour = tf.math.floordiv(tf.math.floormod(seconds, _SECONDS_PER_DAY), 3600)
    z = days + 719468
    era = tf.math.floordiv(z, 146097)
    doe = z - era * 146097
    yoe = (doe - doe // 1460 + doe // 36524 - doe // 146096) // 365
    day_of_march_year = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * day_of_march_year + 2) // 153
    day = day_of_march_year - (153 * mp + 2) // 5 + 1
    month = tf.where(mp < 10, mp + 3, mp - 9)
    year = yoe + era * 400 + tf.cast(month <= 2, tf.int64)
    day_of_year = days - _days_from_civil_jan1(tf, year) + 1
    weekday = tf.math.floormod(days + 3, 7)  # 1970-01-01 was a Thursday: 3
    raw_week = (day_of_year - (weekday + 1) + 10) // 7
    # Week 0 is the previous year's last week; a week past this year's last, week 1.
    week = tf.where(raw_week < 1, _iso_weeks_in_year(tf, year - 1),
                    tf.where(raw_week > _iso_weeks_in_year(tf, year),
                             tf.ones_like(raw_week), raw_week))
    return {"day_of_week": weekday, "month": month, "day_of_month": day,
            "day_of_year": day_of_year, "week_of_year": week, "hour": hour}


def calendar_features(seconds: Any, features: tuple[str, ...]) -> Any:
    """``float32 [..., len(features)]``: the scaled channels of ``features`` for
    timestamps ``seconds`` (``int64 [...]``)."""
    import tensorflow as tf

    values = calendar_values(seconds)
    channels = []
    for name in features:
        offset, span = _SCALE[name]
        channels.append(tf.cast(values[name] - offset, tf.float32) / span - 0.5)
    return tf.stack(channels, axis=-1)
