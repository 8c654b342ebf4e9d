"""Every console page in headless Chromium at a desktop (1,440 px) and a phone (390 px) width, in the light
and the dark scheme: no serious or critical axe-core violation, no sideways scroll at 390 px; delivery rows
open from the keyboard; a run's page reads the API from its event stream, not on a timer.

axe-core is installed at test time with npm (pinned, into a cache outside the repository) rather than
vendored: 650 KB of minified third-party code stays out of the tree, and the tests/clients suite already
needs npm. With ``CONSOLE_SCREENSHOTS=1`` the test also writes docs/console/*.png and docs/console/axe.md.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from playwright.async_api import Browser, Page, expect

from service.worker.runtime import WorkerRuntime
from tests.conftest import ALICE, Receiver, Stack, StackFactory
from tests.console.conftest import CHROMIUM, NO_BROWSER

if CHROMIUM is None:
    pytest.skip(NO_BROWSER, allow_module_level=True)

AXE_VERSION = "4.14.1"
AXE_CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / f"hookbridge-axe-{AXE_VERSION}"
DOCS = Path(__file__).resolve().parents[2] / "docs" / "console"
SHOTS = os.environ.get("CONSOLE_SCREENSHOTS") == "1"
DEADLINE_MS = 30_000


@pytest.fixture(scope="session")
def axe_source() -> str:
    path = AXE_CACHE / "node_modules" / "axe-core" / "axe.min.js"
    if not path.exists():
        npm = shutil.which("npm")
        if npm is None:
            pytest.skip("no npm to install axe-core with (apt-get install npm)")
        subprocess.run(
            [
                npm,
                "install",
                "--prefix",
                str(AXE_CACHE),
                "--no-save",
                "--ignore-scripts",
                f"axe-core@{AXE_VERSION}",
            ],
            check=True,
            capture_output=True,
            timeout=300,
        )
    return path.read_text()


async def axe(page: Page, source: str) -> list[dict[str, Any]]:
    if not await page.evaluate("typeof window.axe !== 'undefined'"):
        await page.add_script_tag(content=source)
    result = await page.evaluate("axe.run(document, {resultTypes: ['violations']})")
    return [
        {
            "id": v["id"],
            "impact": v["impact"],
            "nodes": len(v["nodes"]),
            "help": v["help"],
            "targets": [n["target"] for n in v["nodes"][:3]],
        }
        for v in result["violations"]
    ]


async def populated(stack: Stack, receiver: Receiver) -> dict[str, Any]:
    receiver.answers = [500]  # the first callback fails once: a retried delivery to look at
    sub = await stack.subscribe(receiver.url, event_types=["run.*"], description="billing app")
    run = await stack.submit("nutrient", metadata={"order_id": "A-1001"})
    await stack.wait_status(run["id"], "succeeded")
    return {"sub": sub, "run": run}


async def sign_in(page: Page, stack: Stack) -> None:
    await page.goto(f"{stack.api_url}/console/")
    await page.fill("#key", ALICE)
    await page.click("#signin-form button[type=submit]")
    await expect(page.locator("#console")).to_be_visible()


PAGES = {
    "runs": ("#/runs", "tr[data-run-id]"),
    "run": ("#/runs/{run}", "ol.timeline .delivery"),
    "subscriptions": ("#/subscriptions", "tr[data-sub-id]"),
    "subscription": ("#/subscriptions/{sub}", "tr[data-delivery-id]"),
    "vendors": ("#/vendors", "section.vendor svg"),
}


async def test_every_page_passes_axe_fits_a_phone_in_both_schemes(
    stack: Stack, receiver: Receiver, browser: Browser, axe_source: str
) -> None:
    made = await populated(stack, receiver)
    report: dict[str, Any] = {}
    failures: list[str] = []
    for width, height in ((1440, 900), (390, 844)):
        for scheme in ("light", "dark"):
            context = await browser.new_context(
                viewport={"width": width, "height": height}, color_scheme=scheme, bypass_csp=True
            )
            page = await context.new_page()
            try:
                await sign_in(page, stack)
                for name, (fragment, ready) in PAGES.items():
                    url = fragment.format(run=made["run"]["id"], sub=made["sub"]["id"])
                    await page.goto(f"{stack.api_url}/console/{url}")
                    await page.wait_for_selector(ready, timeout=DEADLINE_MS)
                    if name == "subscription":  # open a delivery, to check its expanded view too
                        await page.locator("tr[data-delivery-id]").first.press("Enter")
                        await page.wait_for_selector("tr.expanded .delivery", timeout=DEADLINE_MS)
                    found = await axe(page, axe_source)
                    report[f"{name} {width}px {scheme}"] = found
                    bad = [v for v in found if v["impact"] in ("serious", "critical")]
                    if bad:
                        failures.append(f"{name} {width}px {scheme}: {bad}")
                    overflow = await page.evaluate("document.documentElement.scrollWidth")
                    if overflow > width:
                        failures.append(f"{name} {width}px {scheme}: the page is {overflow} px wide")
                    if SHOTS:
                        DOCS.mkdir(parents=True, exist_ok=True)
                        await page.screenshot(path=DOCS / f"{name}-{width}-{scheme}.png")
            finally:
                await context.close()
    if SHOTS:
        lines = [
            "# axe-core report of the console",
            "",
            f"axe-core {AXE_VERSION}, every page at 1,440 and 390 px,",
        ]
        lines += ["light and dark (tests/console/test_console_a11y.py). Violations by page:", ""]
        lines += ["| page | violations (id, impact, nodes) |", "| --- | --- |"]
        for key, found in report.items():
            text = "; ".join(f"{v['id']} ({v['impact']}, {v['nodes']})" for v in found) or "none"
            lines.append(f"| {key} | {text} |")
        lines += ["", "```json", json.dumps(report, indent=1), "```", ""]
        (DOCS / "axe.md").write_text("\n".join(lines))
    assert failures == [], "\n".join(failures)


async def test_delivery_rows_open_from_the_keyboard(stack: Stack, receiver: Receiver, page: Page) -> None:
    made = await populated(stack, receiver)
    await sign_in(page, stack)
    await page.goto(f"{stack.api_url}/console/#/subscriptions/{made['sub']['id']}")
    row = page.locator("tr[data-delivery-id]").first
    await expect(row).to_be_visible(timeout=DEADLINE_MS)
    await page.focus('select[name="delivery-status"]')
    await page.keyboard.press("Tab")  # from the log's filter to its first row, as a keyboard user goes
    assert await page.evaluate("document.activeElement.dataset.deliveryId") == await row.get_attribute(
        "data-delivery-id"
    )
    outline = await row.evaluate("r => getComputedStyle(r).outlineStyle")
    assert outline != "none"  # the focus is visible
    await page.keyboard.press("Space")
    await expect(page.locator("tr.expanded .delivery table.attempts")).to_be_visible(timeout=DEADLINE_MS)
    # The log is drawn again with the row open: the focus stays on it, for the next key.
    assert await page.evaluate("document.activeElement.dataset.deliveryId") == await row.get_attribute(
        "data-delivery-id"
    )
    await page.goto(f"{stack.api_url}/console/#/runs")
    run_row = page.locator(f'tr[data-run-id="{made["run"]["id"]}"]')
    await expect(run_row).to_be_visible(timeout=DEADLINE_MS)
    await run_row.focus()
    await expect(run_row).to_be_focused(timeout=DEADLINE_MS)
    await page.keyboard.press("Enter")
    await expect(page.locator("ol.timeline")).to_be_visible(timeout=DEADLINE_MS)
    assert made["run"]["id"] in page.url


async def test_a_pending_runs_page_reads_the_api_on_events_not_on_a_timer(
    make_stack: StackFactory, receiver: Receiver, page: Page
) -> None:
    """8 subscriptions and a run still queued (no worker yet): in 10 s its page makes one load and opens
    one stream; main's console read everything again every 2 s while anything was pending."""
    stack = await make_stack(worker=False)
    for i in range(8):
        await stack.subscribe(f"{receiver.url}?n={i}", event_types=["run.*"])
    run = await stack.submit("nutrient")
    await sign_in(page, stack)
    await expect(page.locator("#live-mode")).to_have_text("live: event stream")  # the runs list settled
    requests: list[str] = []
    page.on("request", lambda r: requests.append(r.url) if "/v1/" in r.url else None)
    await page.goto(f"{stack.api_url}/console/#/runs/{run['id']}")
    await expect(page.locator("#live-mode")).to_have_text("live: the run's event stream", timeout=DEADLINE_MS)
    await page.wait_for_timeout(10_000)  # the measurement window itself, not a wait for work
    streams = [u for u in requests if u.endswith("/stream")]
    print(
        f"a pending run's page, 8 subscriptions, 10 s: {len(requests)} API requests ({len(streams)} stream)"
    )
    assert len(streams) == 1
    # One load: the subscriptions, the run, its events, the run's deliveries (its own index); the stream.
    assert len(requests) <= 1 + 2 + 1 + 1


async def test_a_subscriptions_page_reads_the_api_on_events_not_on_a_timer(
    make_stack: StackFactory, receiver: Receiver, page: Page
) -> None:
    """A subscription with nothing pending: in 6 s its page makes one load and opens one stream (main's
    console read the subscription and its log again every 2 s)."""
    stack = await make_stack(worker=False)
    sub = await stack.subscribe(receiver.url, event_types=["run.*"])
    await sign_in(page, stack)
    await expect(page.locator("#live-mode")).to_have_text("live: event stream")  # the runs list settled
    requests: list[str] = []
    page.on("request", lambda r: requests.append(r.url) if "/v1/" in r.url else None)
    await page.goto(f"{stack.api_url}/console/#/subscriptions/{sub['id']}")
    await expect(page.get_by_text("No deliveries.")).to_be_visible(timeout=DEADLINE_MS)
    await page.wait_for_timeout(6_000)  # the measurement window itself, not a wait for work
    streams = [u for u in requests if u.endswith("/stream")]
    print(
        f"a subscription's page, nothing pending, 6 s: {len(requests)} API requests ({len(streams)} stream)"
    )
    assert len(streams) == 1
    # One load (the subscription, its log) and one more when the stream opens; the stream.
    assert len(requests) <= 2 * 2 + 1


async def test_a_runs_page_follows_its_stream_to_the_end(
    make_stack: StackFactory, receiver: Receiver, page: Page
) -> None:
    """The same page while a worker runs it: the timeline fills from the stream, without a reload, and the
    reads stay bounded (a burst of events is one read)."""
    stack = await make_stack(worker=False)
    for i in range(8):
        await stack.subscribe(f"{receiver.url}?n={i}", event_types=["run.*"])
    run = await stack.submit("nutrient")
    await sign_in(page, stack)
    await expect(page.locator("#live-mode")).to_have_text("live: event stream")  # the runs list settled
    requests: list[str] = []
    page.on("request", lambda r: requests.append(r.url) if "/v1/" in r.url else None)
    await page.goto(f"{stack.api_url}/console/#/runs/{run['id']}")
    await expect(page.locator("#live-mode")).to_have_text("live: the run's event stream", timeout=DEADLINE_MS)
    await page.evaluate("window.sameDocument = true")
    worker = WorkerRuntime(stack.settings)
    task = asyncio.create_task(worker.run(serve_health=False))
    try:
        done = page.locator("ol.timeline li", has_text="run.succeeded").locator(".delivery .badge")
        await expect(done).to_have_text(["succeeded"] * 8, timeout=DEADLINE_MS)
    finally:
        worker.request_stop()
        await task
    assert await page.evaluate("window.sameDocument") is True
    print(f"a run's page from queued to delivered: {len(requests)} API requests")
