"""Takes the README's pictures of the console (docs/console.png, docs/console-vendors.png) against the
dev stack, with the system's Chromium: ``.venv/bin/python -m tests.console.screenshot``.

A receiver that answers 500 to the first attempt at some events gives the timeline a retried delivery, and
one that is always down a delivery that failed for good; a few documents marked ``fail`` give the vendor
pictures failures.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import os
import shutil
import sys
from pathlib import Path

import httpx
from playwright.async_api import async_playwright
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from service.dev.embedded_redis import free_port
from service.dev.stack import DEV_API_KEY, run_stack
from service.observability import logs

DOCS = Path(__file__).resolve().parents[2] / "docs"
KEY = DEV_API_KEY.split(":", 1)[1]
TERMINAL = ("succeeded", "failed", "canceled")


def receiver() -> Starlette:
    seen: set[str] = set()

    async def hook(request: Request) -> Response:
        event_id = request.headers["webhook-id"]
        first = event_id not in seen
        seen.add(event_id)
        if first and hashlib.sha256(event_id.encode()).digest()[0] % 3 == 0:
            return Response("upstream database timeout", status_code=500)
        return Response(status_code=204)

    async def down(request: Request) -> Response:
        return Response("maintenance until 14:00 UTC", status_code=503)

    return Starlette(routes=[Route("/hooks", hook, methods=["POST"]), Route("/down", down, methods=["POST"])])


def document(name: str) -> dict[str, str]:
    return {
        "content_base64": base64.b64encode(b"%PDF-1.4 " + name.encode()).decode(),
        "filename": name,
        "media_type": "application/pdf",
    }


async def populate(api: httpx.AsyncClient, hook_url: str) -> str:
    """Runs and deliveries to look at; answers the run whose timeline shows a retried delivery."""
    types = ["run.submitted", "run.succeeded", "run.failed", "run.canceled"]
    sub = (await api.post("/v1/subscriptions", json={"url": hook_url, "event_types": types})).json()
    down = (
        await api.post(
            "/v1/subscriptions",
            json={"url": hook_url.replace("/hooks", "/down"), "description": "billing app"},
        )
    ).json()
    for i in range(18):
        vendor = ("nutrient", "cloudsquid", "uptiq")[i % 3]
        body = {
            "vendor": vendor,
            "document": document(f"invoice-{i}{'-fail' if i % 7 == 3 else ''}.pdf"),
            "metadata": {"order_id": f"A-{1000 + i}"},
        }
        if vendor == "uptiq":
            body["options"] = {"documentType": "Invoice"}
        (await api.post("/v1/runs", json=body)).raise_for_status()
    await api.post(f"/v1/subscriptions/{sub['id']}/test")
    for _ in range(600):
        runs = (await api.get("/v1/runs", params={"limit": 50})).json()["data"]
        if all(r["status"] in TERMINAL for r in runs):
            break
        await asyncio.sleep(0.1)
    for _ in range(600):
        answers = [
            (await api.get(f"/v1/subscriptions/{sid}/deliveries", params={"limit": 200})).json()["data"]
            for sid in (sub["id"], down["id"])
        ]
        retried = [d for d in answers[0] if d["run_id"] and d["attempts"] > 1 and d["status"] == "succeeded"]
        if retried and not [d for log in answers for d in log if d["status"] == "pending"]:
            return str(retried[0]["run_id"])
        await asyncio.sleep(0.1)
    raise SystemExit("no delivery was retried")


async def main() -> int:
    chromium = shutil.which("chromium")
    if chromium is None:
        print("no chromium on PATH (apt-get install chromium)", file=sys.stderr)
        return 2
    logs.configure("console", "WARNING")
    env = dict(os.environ)
    env.update(HOOKBRIDGE_SIM_DURATION_S="1,3", HOOKBRIDGE_RETRY_SCHEDULE="1s,2s,5s")
    env.setdefault("HOOKBRIDGE_PROGRESS_MIN_INTERVAL_S", "0.5")
    async with run_stack(env) as stack:
        port = free_port()
        await stack.servers.start(receiver(), port)
        headers = {"Authorization": f"Bearer {KEY}"}
        async with httpx.AsyncClient(base_url=stack.api_url, headers=headers) as api:
            run_id = await populate(api, f"http://127.0.0.1:{port}/hooks")
            async with async_playwright() as playwright:
                browser = await playwright.chromium.launch(executable_path=chromium)
                page = await browser.new_page(viewport={"width": 1280, "height": 860})
                await page.goto(f"{stack.api_url}/console/")
                await page.fill("#key", KEY)
                await page.click("#signin-form button[type=submit]")
                await page.wait_for_selector("tr[data-run-id]")
                await page.goto(f"{stack.api_url}/console/#/runs/{run_id}")
                await page.wait_for_selector("ol.timeline .delivery")
                await page.wait_for_selector("ol.timeline .delivery button.retry")
                await page.screenshot(path=DOCS / "console.png", full_page=True)
                await page.goto(f"{stack.api_url}/console/#/vendors")
                await page.wait_for_selector("section.vendor svg")
                await page.screenshot(path=DOCS / "console-vendors.png")
                await browser.close()
    print(f"wrote {DOCS / 'console.png'} and {DOCS / 'console-vendors.png'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
