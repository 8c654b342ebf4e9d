"""A headless Chromium driven by Playwright: the system's browser (Debian's ``chromium``), since
Playwright's own download is not reachable here. Without one, the browser tests are skipped and the
session's summary says so in one line."""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator
from typing import Any

import pytest
from playwright.async_api import Browser, Page, async_playwright

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
NO_BROWSER = "tests/console: no chromium on PATH (apt-get install chromium); the browser tests are skipped"


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if CHROMIUM is None and any(
        "tests/console/" in r.nodeid for r in terminalreporter.stats.get("skipped", [])
    ):
        terminalreporter.write_line(NO_BROWSER, yellow=True)


@pytest.fixture
async def browser() -> AsyncIterator[Browser]:
    if CHROMIUM is None:
        pytest.skip(NO_BROWSER)
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=CHROMIUM, headless=True)
        try:
            yield browser
        finally:
            await browser.close()


@pytest.fixture
async def page(browser: Browser) -> AsyncIterator[Page]:
    context = await browser.new_context(viewport={"width": 1280, "height": 900})
    try:
        yield await context.new_page()
    finally:
        await context.close()
