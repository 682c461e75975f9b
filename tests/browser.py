"""Headless Chromium for the report's browser tests: Debian's package
(``/usr/bin/chromium``) driven by Playwright, which the project's set-up installs
(scripts/setup_env.sh; Playwright from the test extra, pointed at Debian's binary:
``playwright install`` would download its own).

Without Chromium or Playwright a test using ``browser`` skips, except under CI
(``CI`` set), where a missing browser is a broken set-up and fails.
"""

from __future__ import annotations

import os
import pathlib
import shutil
from collections.abc import Callable, Sequence
from typing import Any

import pytest

from reader.report.html import SECTION_IDS

# The sections of an image dataset with classes, without --compare.
IMAGE_SECTIONS = tuple(s for s in SECTION_IDS if s != "compare")

CHROMIUM = "/usr/bin/chromium"


def _browser_missing() -> str | None:
    """Why the browser test cannot run here, or None."""
    if not (os.path.exists(CHROMIUM) or shutil.which("chromium")):
        return f"Debian's chromium is not installed ({CHROMIUM})"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "playwright is not installed (pip install -e '.[test]')"
    return None


def _in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false")


@pytest.fixture(scope="module")
def browser():
    missing = _browser_missing()
    if missing:
        message = f"{missing}: run scripts/setup_env.sh"
        if _in_ci():
            pytest.fail(f"CI is set but {message}.")
        pytest.skip(message)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        # Playwright adds --no-sandbox (the tests may run as root); /dev/shm is small
        # in containers.
        launched = playwright.chromium.launch(
            executable_path=CHROMIUM if os.path.exists(CHROMIUM) else shutil.which("chromium"),
            headless=True, args=["--disable-dev-shm-usage"])
        yield launched
        launched.close()


def open_offline(browser, path: str, screenshot: pathlib.Path,
                 sections: Sequence[str] = IMAGE_SECTIONS,
                 check: Callable[[Any], list[str]] | None = None) -> list[str]:
    """Opens ``path`` offline, every request other than file: and data: aborted;
    returns the problems seen (console errors, page errors, failed or blocked
    requests, ``sections`` missing, hidden or out of order, other sections present, a
    navigation link to no section, and what ``check`` finds on the Playwright page)
    and saves a full-page screenshot."""
    problems: list[str] = []
    context = browser.new_context(offline=True, viewport={"width": 1280, "height": 900})
    page = context.new_page()
    page.on("console", lambda m: m.type == "error" and problems.append(f"console: {m.text}"))
    page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
    page.on("requestfailed", lambda r: problems.append(f"failed: {r.url} {r.failure}"))

    def guard(route) -> None:
        url = route.request.url
        if url.startswith(("file:", "data:")):
            route.continue_()
        else:
            problems.append(f"blocked: {url}")
            route.abort()

    page.route("**/*", guard)
    page.goto(pathlib.Path(path).resolve().as_uri(), wait_until="load")
    for section_id in sections:
        located = page.locator(f"section#{section_id}")
        if located.count() != 1 or not located.is_visible():
            problems.append(f"section #{section_id} missing or hidden")
    found = page.evaluate("Array.from(document.querySelectorAll('section')).map(s => s.id)")
    if found != list(sections):
        problems.append(f"sections {found}, expected {list(sections)}")
    links = page.evaluate("Array.from(document.querySelectorAll('nav a'))"
                          ".map(a => a.getAttribute('href'))")
    if links != [f"#{s}" for s in sections]:
        problems.append(f"navigation links {links}")
    if page.locator("img").count() and page.evaluate(
            "Array.from(document.images).some(i => !i.complete || i.naturalWidth === 0)"):
        problems.append("an image did not decode")
    if check is not None:
        problems += check(page)
    page.screenshot(path=str(screenshot), full_page=True)
    context.close()
    return problems
