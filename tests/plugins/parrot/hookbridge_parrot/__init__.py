"""Parrot, a toy document-extraction vendor: ``POST /jobs`` starts a job, ``GET /jobs/{id}`` polls it,
``POST /jobs/{id}/cancel`` stops it. The adapter is all a plugin needs: a ``VendorSpec`` registered under
the entry point group ``hookbridge.vendors`` (see pyproject.toml). Protocol v2: each method takes the step's
``call`` and tags its requests with ``call.extensions(kind)``."""

from __future__ import annotations

import base64
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

import httpx

from service.vendors.base import (
    CANCELED,
    FAILED,
    NO_CALL,
    QUEUED,
    RUNNING,
    SUCCEEDED,
    Call,
    Kind,
    PollResult,
    SubmitRequest,
    Submitted,
    VendorDefaults,
    VendorExpired,
    VendorRejected,
    VendorSetting,
    VendorSpec,
    VendorTransient,
)
from service.vendors.http import (
    error_message,
    raise_for_transient,
    retry_after_seconds,
    transport_errors,
)

STATES = {"waiting": QUEUED, "working": RUNNING, "done": SUCCEEDED, "failed": FAILED, "canceled": CANCELED}


class ParrotAdapter:
    name = "parrot"
    supports_cancel = True

    def __init__(self, client: httpx.AsyncClient, region: str) -> None:
        self._client = client
        self._region = region

    async def submit(self, request: SubmitRequest, call: Call = NO_CALL) -> Submitted:
        doc = request.document
        body: dict[str, Any] = {"operation": request.operation, "filename": doc.filename}
        if doc.url is not None:
            body["url"] = doc.url
        else:
            body["content"] = base64.b64encode(doc.content or b"").decode()
        with transport_errors():
            response = await self._client.post(
                "/jobs",
                json=body,
                headers={"Idempotency-Key": request.run_id, "X-Region": self._region},
                extensions=call.extensions(Kind.SUBMIT),
            )
        raise_for_transient(response)
        if not response.is_success:
            raise VendorRejected(error_message(response), status_code=response.status_code)
        job = response.json()
        return Submitted(vendor_run_id=str(job["id"]), vendor_status=str(job["state"]))

    async def poll(self, vendor_run_id: str, state: dict[str, Any], call: Call = NO_CALL) -> PollResult:
        with transport_errors():
            response = await self._client.get(
                f"/jobs/{quote(vendor_run_id, safe='')}", extensions=call.extensions(Kind.POLL)
            )
        raise_for_transient(response)
        if response.status_code == 404:
            raise VendorExpired(error_message(response), status_code=404)
        if not response.is_success:
            raise VendorTransient(f"HTTP {response.status_code}: {error_message(response)}")
        job = response.json()
        # Parrot's "ask again in N s" on a poll's 200 (Protocol v2): the worker keeps it within its bounds.
        retry_after_s = retry_after_seconds(response.headers.get("retry-after"))
        vendor_status = str(job.get("state"))
        status = STATES.get(vendor_status, RUNNING)
        if status == FAILED:
            return PollResult(FAILED, vendor_status, error=str(job.get("error") or "parrot failed"))
        return PollResult(
            status,
            vendor_status,
            result=job.get("result") if status == SUCCEEDED else None,
            retry_after_s=retry_after_s,
        )

    async def fetch_result(self, vendor_run_id: str, state: dict[str, Any], call: Call = NO_CALL) -> Any:
        return (await self.poll(vendor_run_id, state, call)).result

    async def cancel(self, vendor_run_id: str, state: dict[str, Any], call: Call = NO_CALL) -> None:
        with transport_errors():
            response = await self._client.post(
                f"/jobs/{quote(vendor_run_id, safe='')}/cancel", extensions=call.extensions(Kind.CANCEL)
            )
        raise_for_transient(response)
        if not response.is_success and response.status_code not in (404, 409):
            raise VendorRejected(error_message(response), status_code=response.status_code)


def _build(client: httpx.AsyncClient, extra: Mapping[str, Any]) -> ParrotAdapter:
    return ParrotAdapter(client, region=str(extra["region"]))


def _region(text: str) -> str:
    if text not in ("eu", "us"):
        raise ValueError("must be eu or us")
    return text


SPEC = VendorSpec(
    name="parrot",
    operations=("extract", "echo"),
    supports_cancel=True,
    defaults=VendorDefaults(
        base_url="https://api.parrot.invalid",
        poll_initial_s=1.0,
        poll_max_s=4.0,
        poll_multiplier=2.0,
        max_run_s=600.0,
    ),
    auth_headers=lambda key: {"X-Parrot-Key": key},
    build=_build,
    settings=(VendorSetting("REGION", "eu", _region, "the region whose endpoint takes the jobs"),),
    description="Parrot, a toy vendor (a test plugin)",
)
