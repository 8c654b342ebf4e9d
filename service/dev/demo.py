"""``hookbridge demo``: the main job end to end, on embedded defaults.

Starts the dev stack (embedded Redis, simulator, API, worker), starts a local receiver, registers it,
submits a sample document to every installed vendor (each pointed at the simulator by
``service.simulator.defaults``, with the run options given there), prints each callback after verifying its
Standard Webhooks signature, and exits 0 when every run has called back verified.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import time
from typing import Any

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from service.delivery import signing
from service.dev.embedded_redis import free_port
from service.dev.stack import DEV_API_KEY, run_stack
from service.observability import logs
from service.simulator import defaults

SAMPLE = b"%PDF-1.4\n% hookbridge demo invoice INV-1001, total 1234.50 EUR\n%%EOF\n"
TERMINAL = {"run.succeeded", "run.failed", "run.canceled"}


def verify(secret: str, headers: dict[str, str], body: bytes) -> bool:
    """Verifies with the ``standardwebhooks`` library when it is installed, else by the spec directly."""
    try:
        from standardwebhooks import Webhook
    except ImportError:
        expected = signing.sign(secret, headers["webhook-id"], int(headers["webhook-timestamp"]), body)
        return expected in headers["webhook-signature"].split(" ")
    try:
        Webhook(secret).verify(body, headers)
    except Exception:
        return False
    return True


async def main(timeout_s: float = 120.0) -> int:
    logs.configure("console", os.environ.get("HOOKBRIDGE_LOG_LEVEL", "WARNING"))
    env = dict(os.environ)
    env.setdefault("HOOKBRIDGE_SIM_DURATION_S", "2,4")
    env.setdefault("HOOKBRIDGE_PROGRESS_MIN_INTERVAL_S", "1")
    inbox: asyncio.Queue[tuple[dict[str, str], bytes]] = asyncio.Queue()

    async def receive(request: Request) -> Response:
        await inbox.put(({k.lower(): v for k, v in request.headers.items()}, await request.body()))
        return Response(status_code=204)

    receiver = Starlette(routes=[Route("/hooks", receive, methods=["POST"])])
    print("hookbridge demo: starting Redis, the vendor simulator, the API and a worker ...", flush=True)
    async with run_stack(env) as stack:
        port = free_port()
        await stack.servers.start(receiver, port)
        key = DEV_API_KEY.split(":", 1)[1]
        async with httpx.AsyncClient(
            base_url=stack.api_url, headers={"Authorization": f"Bearer {key}"}
        ) as api:
            sub = (
                (
                    await api.post(
                        "/v1/subscriptions",
                        json={
                            "url": f"http://127.0.0.1:{port}/hooks",
                            "event_types": ["run.*"],
                            "description": "demo receiver",
                        },
                    )
                )
                .raise_for_status()
                .json()
            )
            print(f"registered receiver {sub['url']} as {sub['id']}")
            runs: dict[str, str] = {}
            for vendor in stack.worker.adapters:
                body = {
                    "vendor": vendor,
                    "document": {
                        "content_base64": base64.b64encode(SAMPLE).decode(),
                        "filename": "invoice.pdf",
                        "media_type": "application/pdf",
                    },
                    "metadata": {"order_id": f"A-{vendor}"},
                    **defaults.demo_run(vendor),
                }
                answer = await api.post("/v1/runs", json=body)
                if answer.status_code == 422 and answer.json().get("code") == "vendor_not_configured":
                    # Installed, but neither simulated nor configured here: nothing to show for it.
                    print(f"skipped {vendor}: {answer.json().get('detail')}")
                    continue
                run = answer.raise_for_status().json()
                runs[run["id"]] = vendor
                print(f"submitted {run['id']} to {vendor}: {run['status']}")
            ok = await _collect(inbox, sub["secret"], runs, timeout_s)
    print(
        "demo finished: every run called back, every signature verified" if ok else "demo FAILED", flush=True
    )
    return 0 if ok else 1


async def _collect(
    inbox: asyncio.Queue[tuple[dict[str, str], bytes]], secret: str, runs: dict[str, str], timeout_s: float
) -> bool:
    pending = set(runs)
    all_verified = True
    deadline = time.monotonic() + timeout_s
    while pending:
        left = deadline - time.monotonic()
        if left <= 0:
            print(f"timed out waiting for {sorted(pending)}")
            return False
        try:
            headers, body = await asyncio.wait_for(inbox.get(), timeout=left)
        except TimeoutError:
            continue
        verified = verify(secret, headers, body)
        all_verified &= verified
        event: dict[str, Any] = json.loads(body)
        run = event["data"].get("run") or {}
        line = f"callback {event['type']:<15} {run.get('id', '')} {runs.get(run.get('id', ''), ''):<12} "
        line += f"signature {'verified' if verified else 'INVALID'}"
        if event["type"] == "run.progress" and run.get("progress"):
            line += f"  progress {run['progress'].get('percent')}% {run['progress'].get('phase') or ''}"
        if event["type"] == "run.succeeded":
            line += f"  result {json.dumps(event['data']['result'])[:80]}"
        if run.get("error"):
            line += f"  error {run['error']['code']}: {run['error']['message']}"
        print(line, flush=True)
        if event["type"] in TERMINAL:
            pending.discard(run.get("id", ""))
    return all_verified
