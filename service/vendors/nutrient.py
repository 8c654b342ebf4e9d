"""Nutrient DWS Data Extraction, async runs (shared/vendors/nutrient-run-asynchronously.md).

Submit ``POST /extraction/{operation}/async`` (multipart ``file`` + ``instructions``, or JSON ``url``)
with ``Idempotency-Key`` = our run id, so a submit retried after a crash returns the same vendor run.
Poll ``GET /extraction/runs/{id}``; fetch ``/assets/result`` only when ``done``; cancel with
``POST /extraction/runs/{id}/cancel``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import httpx

from service.vendors.base import (
    CANCELED,
    FAILED,
    QUEUED,
    RUNNING,
    SUCCEEDED,
    PollResult,
    Progress,
    SubmitRequest,
    Submitted,
    VendorDefaults,
    VendorExpired,
    VendorRejected,
    VendorSpec,
    VendorTransient,
)
from service.vendors.http import error_message, raise_for_transient, transport_errors

STATUSES = {"queued": QUEUED, "running": RUNNING, "done": SUCCEEDED, "error": FAILED, "canceled": CANCELED}


class NutrientAdapter:
    name = "nutrient"
    supports_cancel = True
    operations = frozenset({"parse", "extract", "classify", "split"})

    def __init__(self, client: httpx.AsyncClient) -> None:
        self._client = client

    async def submit(self, request: SubmitRequest) -> Submitted:
        instructions = request.options.get("instructions")
        headers = {"Idempotency-Key": request.run_id}
        path = f"/extraction/{request.operation}/async"
        doc = request.document
        with transport_errors():
            if doc.url is not None:
                body: dict[str, Any] = {"url": doc.url}
                if instructions is not None:
                    body["instructions"] = instructions
                response = await self._client.post(
                    path, json=body, headers=headers, extensions={"kind": "submit"}
                )
            else:
                data = {"instructions": json.dumps(instructions)} if instructions is not None else None
                files = {"file": (doc.filename, doc.content or b"", doc.media_type)}
                response = await self._client.post(
                    path, files=files, data=data, headers=headers, extensions={"kind": "submit"}
                )
        raise_for_transient(response)  # 503 run_enqueue_failed stored nothing: submitting again is safe
        if not response.is_success:
            raise VendorRejected(error_message(response), status_code=response.status_code)
        run_id = response.headers.get("x-nutrient-run-id")
        status = None
        try:
            body_json = response.json()
            run_id = run_id or body_json.get("id")
            status = body_json.get("status")
        except ValueError:
            pass
        if not run_id:
            location = response.headers.get("location", "")
            run_id = location.rstrip("/").rsplit("/", 1)[-1] or None
        if not run_id:
            raise VendorTransient("the vendor accepted the run but named no run id")
        return Submitted(vendor_run_id=run_id, vendor_status=status)

    async def poll(self, vendor_run_id: str, state: dict[str, Any]) -> PollResult:
        with transport_errors():
            response = await self._client.get(
                f"/extraction/runs/{vendor_run_id}", extensions={"kind": "poll"}
            )
        self._check(response)
        run = response.json()
        vendor_status = str(run.get("status"))
        status = STATUSES.get(vendor_status, RUNNING)  # an unknown status is never terminal
        progress = None
        if isinstance(run.get("progress"), dict):
            p = run["progress"]
            percent = p.get("percent")
            progress = Progress(
                percent=float(percent) if isinstance(percent, int | float) else None,
                phase=p.get("phase") if isinstance(p.get("phase"), str) else None,
            )
        if status == FAILED:
            error = run.get("error") if isinstance(run.get("error"), dict) else {}
            return PollResult(
                FAILED, vendor_status, error=_failure_message(error), error_details=error or None
            )
        return PollResult(status, vendor_status, progress=progress, needs_fetch=status == SUCCEEDED)

    async def fetch_result(self, vendor_run_id: str, state: dict[str, Any]) -> Any:
        with transport_errors():
            response = await self._client.get(
                f"/extraction/runs/{vendor_run_id}/assets/result", extensions={"kind": "result"}
            )
        self._check(response)
        try:
            return response.json()
        except ValueError as exc:
            raise VendorTransient("the result asset is not JSON") from exc

    async def cancel(self, vendor_run_id: str, state: dict[str, Any]) -> None:
        with transport_errors():
            response = await self._client.post(
                f"/extraction/runs/{vendor_run_id}/cancel", extensions={"kind": "cancel"}
            )
        raise_for_transient(response)
        # 409 run_not_cancelable: it finished first; 410: gone. Either way there is nothing to stop.
        if not response.is_success and response.status_code not in (409, 410):
            raise VendorRejected(error_message(response), status_code=response.status_code)

    @staticmethod
    def _check(response: httpx.Response) -> None:
        raise_for_transient(response)
        if response.status_code in (404, 410):
            raise VendorExpired(error_message(response), status_code=response.status_code)
        if not response.is_success:
            raise VendorTransient(f"HTTP {response.status_code}: {error_message(response)}")


def _failure_message(error: dict[str, Any]) -> str:
    details = error.get("details") if isinstance(error.get("details"), dict) else {}
    source = details.get("source") if details else None
    status = error.get("status")
    if status == 402 and source == "billing":
        return "billing failed at the vendor: the result is withheld and nothing was charged"
    message = error.get("message") or error.get("errorMessage") or (details or {}).get("message")
    parts = [str(message) if message else "the vendor reported an error"]
    if status is not None or source:
        parts.append(f"(status {status}, source {source})")
    return " ".join(parts)


def _build(client: httpx.AsyncClient, extra: Mapping[str, Any]) -> NutrientAdapter:
    return NutrientAdapter(client)


# Registered under the entry point group hookbridge.vendors (pyproject.toml).
SPEC = VendorSpec(
    name=NutrientAdapter.name,
    operations=("parse", "extract", "classify", "split"),
    supports_cancel=NutrientAdapter.supports_cancel,
    # "Wait at least 2 s between polls", doubling to 30 s; 15 minutes of processing at most (S003).
    defaults=VendorDefaults(
        base_url="https://api.nutrient.io",
        poll_initial_s=2.0,
        poll_max_s=30.0,
        poll_multiplier=2.0,
        max_run_s=1800.0,
    ),
    auth_headers=lambda key: {"Authorization": f"Bearer {key}"},
    build=_build,
    description="Nutrient DWS Data Extraction, async runs",
)
