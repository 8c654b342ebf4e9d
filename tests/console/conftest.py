"""A headless Chromium driven by Playwright: the system's browser (Debian's ``chromium``), since
Playwright's own download is not reachable here. Without one, the browser tests' module skips itself
as a whole, so that the session's summary says so in one line (pytest's ``-ra``)."""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator

import pytest
from playwright.async_api import Browser, Page, async_playwright

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
NO_BROWSER = "no chromium on PATH (apt-get install chromium): the console's browser tests are skipped"


@pytest.fixture
async def browser() -> AsyncIterator[Browser]:
    assert CHROMIUM is not None, NO_BROWSER
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
