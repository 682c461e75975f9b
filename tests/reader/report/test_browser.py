"""The report opened in a real browser with the network blocked (``tests/browser.py``:
Debian's headless Chromium driven by Playwright; the ``browser`` fixture skips
without them, except under CI, where it fails).
"""

from __future__ import annotations

import re

from reader.report import build as report
from tests.browser import IMAGE_SECTIONS, open_offline
from tests.reader.report import fixtures as report_fixtures

# A count of examples as a tooltip shows it: a whole number, or a rounded estimate.
_COUNT_TITLE = re.compile(r".*: (<1|≈?\d[\d,]*) examples?")


def _image_checks(page) -> list[str]:
    """What the image report with ``--compare`` must show, as laid out on screen."""
    problems = []
    settings = page.locator("section#settings")
    for text in ("image_size", "train 0.8, validation 0.1, test 0.1", "tensorflow_transform"):
        if not settings.get_by_text(text, exact=True).first.is_visible():
            problems.append(f"settings: {text!r} not visible")
    pairs = page.locator("section#duplicates .pair")
    if pairs.count() != 3:
        problems.append(f"{pairs.count()} duplicate pairs shown, expected 3")
    for i in range(pairs.count()):
        first, second = (pairs.nth(i).locator("figure").nth(j).bounding_box() for j in (0, 1))
        if first["y"] != second["y"] or second["x"] < first["x"] + first["width"]:
            problems.append(f"pair {i}: its two images are not side by side")
    if pairs.nth(0).locator("img").count() != 2:
        problems.append("the first pair does not show its two images")
    drift = page.locator("section#drift")
    if drift.locator("td", has_text="not judged").count() or not drift.locator(
            "p.unjudged").is_visible():
        problems.append("drift: comparisons not judged are not summed up in one line")
    if not page.get_by_text("the source file's width in pixels (upright), before "
                            "resizing").first.is_visible():
        problems.append("features: width not labelled as the source file's")
    titles = page.eval_on_selector_all("svg title", "ts => ts.map(t => t.textContent)")
    counts = [t for t in titles if " to " in t and "window" not in t]
    if not counts or not all(_COUNT_TITLE.fullmatch(t) for t in counts):
        problems.append(f"tooltips with other than whole counts: {counts}")
    return problems


def test_report_renders_offline_in_chromium(browser, tmp_path):
    images = str(tmp_path / "images")
    report_fixtures.write_image_dataset(images)
    page = report.write_report(images, compare=images)
    assert open_offline(browser, page, tmp_path / "images.png", ("compare", *IMAGE_SECTIONS),
                        _image_checks) == []
    assert (tmp_path / "images.png").stat().st_size > 10_000


def _series_checks(page) -> list[str]:
    headings = page.locator("section#samples h3").all_inner_texts()
    return [] if headings == ["ramp: level (target)"] else [f"series charts {headings}"]


def test_series_report_renders_offline_in_chromium(browser, tmp_path):
    series = str(tmp_path / "series")
    report_fixtures.write_series_dataset(series)
    # No labels, duplicates or flags: a forecasting series has none of them.
    assert open_offline(browser, report.write_report(series), tmp_path / "series.png",
                        ("counts", "settings", "features", "drift", "rejected", "samples"),
                        _series_checks) == []
