"""The datasets and pages the report's tests read: one image and one series dataset
per test module, each with its report written."""

from __future__ import annotations

import pytest

from reader.report import build as report
from tests.reader.report import fixtures as report_fixtures
from tests.reader.report.fixtures import read


@pytest.fixture(scope="module")
def image_dataset(tmp_path_factory) -> str:
    out = str(tmp_path_factory.mktemp("report_images"))
    report_fixtures.write_image_dataset(out)
    return out


@pytest.fixture(scope="module")
def image_page(image_dataset) -> str:
    return read(report.write_report(image_dataset))


@pytest.fixture(scope="module")
def series_page(tmp_path_factory) -> str:
    out = str(tmp_path_factory.mktemp("report_series"))
    report_fixtures.write_series_dataset(out)
    return read(report.write_report(out))
