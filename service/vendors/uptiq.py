"""Uptiq DocAI async extraction (shared/vendors/NOTES.md §3, uptiq-async-extraction-and-polling.md).

Submit ``POST /extract`` with a JSON body: the run's ``options`` (``documentType`` or ``documentTypes``, and
any other body field such as ``model``, ``enableCaching``, ``processorId``) plus the document. Any 2xx is
success (200 for ``documentType``, 202 for ``documentTypes``); the poll id is ``data._id`` and the job
state ``data.documentStatus``: the envelope ``status`` is never read. Poll
``GET /document-extractions/{id}`` and read ``extraction.status`` only.

The async record carries more than the result (S004): ``creditReservation``, ``webhookStatus`` and
``fraudResults`` are kept in the result the client gets, beside the synchronous response's fields
(``extractedData``, ``extractionMetrics``...); ``creditReservation`` is also in the run's ``usage``, as
reported, with no credits counted.

Where the documents are silent:

- The ``/extract`` body schema (``request.json`` of the sync quickstart) is not published: "The request
  body is identical to the synchronous quickstart" (S004) names no field, and no public page found names
  them (searched for Uptiq DocAI's extract body). Not documented; so the three document field names are a
  setting, ``HOOKBRIDGE_UPTIQ_BODY_FIELDS`` (url, base64 bytes, file name; default
  ``fileUrl,fileBase64,fileName``), because a guess built into the code could only be fixed by a release.
  Under a reading the setting does not match, Uptiq answers 400 (no document): the run ends
  ``vendor_rejected`` after one ``POST /extract``, with Uptiq's message naming what it wants. The
  simulator plays both readings (``HOOKBRIDGE_SIM_UPTIQ_BODY_FIELDS``).
- A 404 just after submit means the record is not visible yet (S004). It is treated as transient for
  :data:`EARLY_404_WINDOW_S` after the submit, and as the vendor no longer having the run after that.
- No cancel API is documented: :meth:`UptiqAdapter.cancel` does nothing. No delete either, so a
  ``zero_retention`` run stays at Uptiq.
- ``creditReservation`` is a reservation, not a charge: kept as reported in the result and in ``usage``,
  never counted as credits spent.
- No idempotency key (``submit_idempotent = False``): a submit that may have created an extraction (a
  timeout or dropped connection after sending, a 2xx without one ``data._id``) ends the run
  ``vendor_submit_ambiguous`` instead of a second ``POST /extract``.
- 401/403 on a poll end the run ``vendor_rejected``; an ``extraction`` without ``status`` is a transient
  fault.
"""

from __future__ import annotations

import base64
import json
import re
import time
from collections.abc import Mapping
from typing import Annotated, Any
from urllib.parse import quote

import httpx
from pydantic import BaseModel, ConfigDict, Field, model_validator

from service.vendors.base import (
    FAILED,
    NO_CALL,
    QUEUED,
    RUNNING,
    SUCCEEDED,
    Call,
    Kind,
    PollResult,
    Progress,
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
    submit_errors,
    transport_errors,
    unexpected_answer,
)

STATUSES = {"Pending": QUEUED, "Processing": RUNNING, "Processed": SUCCEEDED, "Failed": FAILED}

# How long after submit a 404 still means "not visible yet" rather than "gone". The docs say to wait about
# a second and retry; 30 s covers several polls at the documented 5-10 s cadence plus clock skew.
EARLY_404_WINDOW_S = 30.0

# Where the submit time goes in the run's adapter state, in epoch seconds. Not ``submitted_at``: the worker
# writes its own ``submitted_at`` (epoch milliseconds) into the same state.
SUBMITTED_KEY = "uptiq_submitted_s"

BODY_FIELDS = ("fileUrl", "fileBase64", "fileName")  # url, base64 bytes, file name: not documented
_FIELD = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")
# Fields of the async record that the synchronous result lacks, kept in what the client gets (S004).
RECORD_EXTRAS = ("fraudResults", "creditReservation", "webhookStatus")


class UptiqAdapter:
    name = "uptiq"
    supports_cancel = False
    # Not documented: S004 names no idempotency key. A submit that may have created an extraction is never
    # sent again (service/worker/decide.py).
    submit_idempotent = False

    def __init__(
        self,
        client: httpx.AsyncClient,
        *,
        early_404_window_s: float = EARLY_404_WINDOW_S,
        body_fields: tuple[str, str, str] = BODY_FIELDS,
    ) -> None:
        self._client = client
        self._early_404_window_s = early_404_window_s
        self._body_fields = body_fields

    async def submit(self, request: SubmitRequest, call: Call = NO_CALL) -> Submitted:
        body = _request_body(request, self._body_fields)
        submitted_at = time.time()
        with submit_errors():
            response = await self._client.post("/extract", json=body, extensions=call.extensions(Kind.SUBMIT))
        raise_for_transient(response)
        if not response.is_success:
            raise VendorRejected(error_message(response), status_code=response.status_code)
        try:
            envelope: Any = response.json()
        except ValueError:
            envelope = None
        data = _submitted_record(envelope.get("data") if isinstance(envelope, dict) else None)
        extraction_id = data.get("_id") if data is not None else None
        if data is None or not isinstance(extraction_id, str) or not extraction_id:
            # "Keep data._id. That is what you poll with." (S004). Any other 2xx (the 202 of a
            # multi-extraction is not shown) may still have queued work: never asked again.
            raise unexpected_answer(response, "one data._id")
        status = data.get("documentStatus")
        return Submitted(
            vendor_run_id=extraction_id,
            vendor_status=status if isinstance(status, str) else None,
            state={SUBMITTED_KEY: submitted_at},
        )

    async def poll(self, vendor_run_id: str, state: dict[str, Any], call: Call = NO_CALL) -> PollResult:
        with transport_errors():
            response = await self._client.get(
                f"/document-extractions/{quote(vendor_run_id, safe='')}",
                extensions=call.extensions(Kind.POLL),
            )
        raise_for_transient(response)
        if response.status_code in (401, 403):
            # Not documented for the poll; a refused key stays refused: the run ends at once.
            raise VendorRejected(error_message(response), status_code=response.status_code)
        if response.status_code == 404:
            self._not_found(response, state)
        if not response.is_success:
            raise VendorTransient(f"HTTP {response.status_code}: {error_message(response)}")
        try:
            envelope: Any = response.json()
        except ValueError as exc:
            raise VendorTransient("the extraction record is not JSON") from exc
        extraction = envelope.get("extraction") if isinstance(envelope, dict) else None
        if not isinstance(extraction, dict):
            raise VendorTransient("the answer has no extraction record")

        raw_status = extraction.get("status")  # the job state; the envelope's "status" is always "success"
        if not isinstance(raw_status, str) or not raw_status:
            # "The field you want is extraction.status" (S004): without it the answer says nothing.
            raise VendorTransient("the extraction record has no status")
        vendor_status = raw_status
        status = STATUSES.get(vendor_status, RUNNING)  # an unknown status is never terminal
        progress = _progress(extraction.get("processingStage"))
        result = extraction.get("result")
        if status == SUCCEEDED:
            kept = dict(result) if isinstance(result, dict) else {} if result is None else {"result": result}
            for name in RECORD_EXTRAS:
                if name in extraction and name not in kept:
                    kept[name] = extraction[name]
            return PollResult(
                SUCCEEDED,
                vendor_status,
                progress=progress,
                result=kept,
                usage=_usage(extraction.get("creditReservation")),
            )
        if status == FAILED:
            return _failure(vendor_status, result, progress)
        return PollResult(status, vendor_status, progress=progress)

    async def fetch_result(self, vendor_run_id: str, state: dict[str, Any], call: Call = NO_CALL) -> Any:
        """Never needed: the poll that reports ``Processed`` carries the result."""
        result = await self.poll(vendor_run_id, state, call)
        return result.result

    async def cancel(self, vendor_run_id: str, state: dict[str, Any], call: Call = NO_CALL) -> None:
        """Uptiq documents no cancel endpoint: nothing to tell it."""

    def _not_found(self, response: httpx.Response, state: dict[str, Any]) -> None:
        submitted_at = _submitted_at(state)
        age = None if submitted_at is None else time.time() - submitted_at
        if age is None or age < self._early_404_window_s:
            raise VendorTransient(
                f"extraction not visible yet (404 {age or 0:.1f}s after submit): {error_message(response)}",
                status_code=404,
            )
        raise VendorExpired(
            f"the vendor has no such extraction (404 {age:.0f}s after submit): {error_message(response)}",
            status_code=404,
        )


def _request_body(request: SubmitRequest, fields: tuple[str, str, str] = BODY_FIELDS) -> dict[str, Any]:
    options = request.options
    document_type, document_types = options.get("documentType"), options.get("documentTypes")
    if document_types is not None:
        if (
            not isinstance(document_types, list)
            or not document_types
            or not all(isinstance(t, str) and t for t in document_types)
        ):
            raise VendorRejected("options.documentTypes must be a non-empty list of document type names")
    elif not isinstance(document_type, str) or not document_type:
        raise VendorRejected(
            'Uptiq needs the document type: pass options.documentType (e.g. "BalanceSheet") '
            "or options.documentTypes (a list) for a multi-extraction"
        )
    url_key, content_key, name_key = fields
    # The options never carry the document, under our names or the default ones.
    body = {k: v for k, v in options.items() if k not in {*fields, *BODY_FIELDS}}
    doc = request.document
    if doc.url is not None:
        body[url_key] = doc.url
    else:
        if not doc.content:
            raise VendorRejected("the document is empty")
        body[content_key] = base64.b64encode(doc.content).decode("ascii")
    body[name_key] = doc.filename
    return body


def parse_body_fields(raw: str) -> tuple[str, str, str]:
    """``HOOKBRIDGE_UPTIQ_BODY_FIELDS``: three JSON field names, url, base64 bytes and file name."""
    names = tuple(p.strip() for p in raw.split(","))
    if len(names) != 3 or len(set(names)) != 3 or not all(_FIELD.match(n) for n in names):
        raise ValueError(
            "three different field names, comma-separated: url, base64 bytes, file name "
            "(like fileUrl,fileBase64,fileName)"
        )
    return (names[0], names[1], names[2])


def _submitted_record(data: Any) -> dict[str, Any] | None:
    """The submit's ``data``: the documented object, or a list of exactly one (a reading of the 202 that
    S004 does not show). A list of several names several jobs, which one run cannot track: None."""
    if isinstance(data, dict):
        return data
    if isinstance(data, list) and len(data) == 1 and isinstance(data[0], dict):
        return data[0]
    return None


def _usage(reservation: Any) -> dict[str, Any] | None:
    """``{"credits": None, "reported": {"creditReservation": ...}}``: S004 lists ``creditReservation`` among
    the record's fields and says nothing of a charge. A reservation is not a charge, so no spend is
    reported (``credits`` stays None and ``hookbridge_vendor_credits_total`` does not count it)."""
    if reservation is None:
        return None
    return {"credits": None, "reported": {"creditReservation": reservation}}


def _submitted_at(state: dict[str, Any]) -> float | None:
    value = state.get(SUBMITTED_KEY)
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    worker_ms = state.get("submitted_at")  # the worker's own record, in milliseconds
    if isinstance(worker_ms, int | float) and not isinstance(worker_ms, bool):
        return float(worker_ms) / 1000
    return None


def _progress(stage: Any) -> Progress | None:
    if not isinstance(stage, dict):
        return None
    phase, message = stage.get("stage"), stage.get("message")
    if not isinstance(phase, str) and not isinstance(message, str):
        return None
    return Progress(
        phase=phase if isinstance(phase, str) else None,
        message=message if isinstance(message, str) else None,
    )


def _failure(vendor_status: str | None, result: Any, progress: Progress | None) -> PollResult:
    result = result if isinstance(result, dict) else {}
    quality = result.get("documentQuality")
    reason = result.get("error") or result.get("message") or (progress.message if progress else None)
    parts = [str(reason) if reason else "the vendor could not process the document"]
    if quality is not None:
        parts.append(f"(documentQuality: {json.dumps(quality, sort_keys=True, separators=(',', ':'))})")
    details: dict[str, Any] = {"documentQuality": quality}
    if progress is not None:
        details["processingStage"] = {"stage": progress.phase, "message": progress.message}
    return PollResult(FAILED, vendor_status, progress=progress, error=" ".join(parts), error_details=details)


def _build(client: httpx.AsyncClient, extra: Mapping[str, Any]) -> UptiqAdapter:
    fields = extra.get("body_fields")
    return UptiqAdapter(client, body_fields=fields if isinstance(fields, tuple) else BODY_FIELDS)


# Registered under the entry point group hookbridge.vendors (pyproject.toml).
class UptiqOptions(BaseModel):
    """An Uptiq run's ``options``: the body fields of its `/extract` request; `documentType` (or
    `documentTypes` for a multi-extraction) is required."""

    # One of the two is required: a model validator, since generators read anyOf-of-required as "any".
    model_config = ConfigDict(extra="allow")

    documentType: Annotated[str, Field(min_length=1, examples=["BalanceSheet"])] | None = None
    documentTypes: Annotated[list[Annotated[str, Field(min_length=1)]], Field(min_length=1)] | None = None

    @model_validator(mode="after")
    def _a_document_type(self) -> UptiqOptions:
        if self.documentType is None and self.documentTypes is None:
            raise ValueError("Uptiq needs documentType (e.g. BalanceSheet), or documentTypes (a list)")
        return self


SPEC = VendorSpec(
    name=UptiqAdapter.name,
    operations=("extract",),
    supports_cancel=UptiqAdapter.supports_cancel,
    defaults=VendorDefaults(
        base_url="https://api-docai-uat.uptiq.ai",
        poll_initial_s=5.0,
        poll_max_s=10.0,
        poll_multiplier=1.5,
        max_run_s=3600.0,
    ),
    auth_headers=lambda key: {"X-Api-Key": key},
    build=_build,
    settings=(
        VendorSetting(
            "BODY_FIELDS",
            BODY_FIELDS,
            parse_body_fields,
            description="the /extract body's document fields (url, base64 bytes, file name): not "
            "published by Uptiq",
        ),
    ),
    description="Uptiq DocAI async extraction",
    options=UptiqOptions,
    required=("API_KEY",),
)
