"""The report opened in a real browser with the network blocked (``tests/browser.py``:
Debian's headless Chromium driven by Playwright; the ``browser`` fixture skips
without them, except under CI, where it fails).
"""

from __future__ import annotations

from reader import report
from tests.browser import open_offline
from tests.reader import report_fixtures


def test_report_renders_offline_in_chromium(browser, tmp_path):
    images = str(tmp_path / "images")
    report_fixtures.write_image_dataset(images)
    page = report.write_report(images, compare=images)
    assert open_offline(browser, page, tmp_path / "images.png") == []
    assert (tmp_path / "images.png").stat().st_size > 10_000


def test_series_report_renders_offline_in_chromium(browser, tmp_path):
    series = str(tmp_path / "series")
    report_fixtures.write_series_dataset(series)
    assert open_offline(browser, report.write_report(series), tmp_path / "series.png") == []
