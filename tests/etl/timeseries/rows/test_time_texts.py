"""Unit tests of etl/timeseries/rows/time_texts.py: timestamp texts kept as a style."""

from __future__ import annotations

import numpy as np
import pytest

from etl.timeseries.rows.time_texts import DATETIME_BIT, NUMERIC_BIT, TimeTexts, detect_style

# 2024-01-02T00:00:00Z in seconds since the epoch.
DAY = 1704153600.0


@pytest.mark.parametrize(("texts", "times", "kinds", "style"), [
    (["2024-01-02"], [DAY], DATETIME_BIT, "date"),
    (["2024-01-02T00:00:00"], [DAY], DATETIME_BIT, "iso_t"),
    (["2024-01-02 01:00:00"], [DAY + 3600], DATETIME_BIT, "iso_space"),
    (["2024-01-02T01:00:00Z"], [DAY + 3600], DATETIME_BIT, "iso_z"),
    (["17", "-3"], [17.0, -3.0], NUMERIC_BIT, "int"),
    (["17.0"], [17.0], NUMERIC_BIT, None),                  # not how "int" writes 17
    (["1.5"], [1.5], NUMERIC_BIT, None),                    # not a whole second
    (["17"], [17.0], NUMERIC_BIT | DATETIME_BIT, None),     # mixed kinds
    ([], [], NUMERIC_BIT, None),
])
def test_detect_style_names_the_style_that_writes_every_text(texts, times, kinds, style):
    assert detect_style(texts, np.array(times), kinds) == style


def test_time_texts_styled_takes_and_slices_rows():
    texts = TimeTexts.styled("date", np.array([DAY, DAY + 86400, DAY + 2 * 86400]))
    assert texts.take(np.array([2, 0])).strings() == ["2024-01-04", "2024-01-02"]
    assert list(texts[1:]) == ["2024-01-03", "2024-01-04"]
    assert texts[0] == "2024-01-02"


def test_time_texts_concat_of_one_style_stays_styled():
    parts = [TimeTexts.styled("int", np.array([1.0])), TimeTexts.styled("int",
                                                                       np.array([2.0]))]
    joined = TimeTexts.concat(parts)
    assert joined.style == "int"
    assert joined.strings() == ["1", "2"]


def test_time_texts_concat_of_mixed_parts_stores_the_texts():
    joined = TimeTexts.concat([TimeTexts.styled("int", np.array([1.0])),
                               TimeTexts.stored(["x"])])
    assert joined.style is None
    assert joined.strings() == ["1", "x"]


def test_time_texts_needs_a_style_or_strings():
    with pytest.raises(ValueError, match="either a style or strings"):
        TimeTexts(None, None, None)
