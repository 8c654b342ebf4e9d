"""The LlamaParse v2 adapter: the shell that sends LlamaParse's requests and applies what ``rules.py``
decides about its answers (next-vendors.md §4; the rules cite their sentences there).

- Submit: a document by URL is ``POST /api/v2/parse`` with JSON ``{source_url, tier, version, ...}``; one
  by bytes is ``POST /api/v2/parse/upload``, multipart, "with a ``file`` part and a ``configuration`` part
  holding the same options as a JSON string" (§4.2). The job id is ``id`` or ``job.id`` (§4.3).
- "**Idempotency**: **NOT FOUND** ... A retried POST creates a new job [inference]" (§4.6):
  ``submit_idempotent`` is False, so a submit that may have reached LlamaParse (a dropped connection or a
  timeout after sending, a 2xx that names no job) is never sent again: the run ends
  ``vendor_submit_ambiguous`` (service/worker/decide.py) rather than parse (and bill) the document twice.
- Poll: ``GET /api/v2/parse/{id}``, no ``expand``: "By default returns job metadata only" (§4.4).
- Result: "``expand`` is opt-in. A poll without ``expand`` never contains content" (§4.8). A ``COMPLETED``
  job's parts (``text``, ``markdown``, ``items``; §4.5) are fetched: first their
  ``*_content_metadata`` (sizes and presigned URLs), then either one GET with them expanded inline or,
  "when the result is large" (§4.5), each part from its presigned URL with the host's :class:`Fetcher`
  (no key sent, the callback address rules, ``MAX_DOCUMENT_BYTES``). An inline part that the answer
  leaves out while its metadata says it exists is read from its URL too.
- Cancel: ``POST /api/v2/parse/{id}/cancel`` (§4.6).
- Zero retention: ``disable_cache`` on the create, and ``DELETE /api/v2/parse/{id}`` once the job is
  terminal (contract §10; the SDK 2.19's route, "NOT FOUND" in §4.6), confirmed by a GET where the DELETE
  answers 404/405.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

import httpx

from hookbridge_llamaparse import rules
from service.vendors.base import (
    NO_CALL,
    Call,
    DocumentTooLarge,
    DocumentUnavailable,
    Fetcher,
    Kind,
    PollResult,
    SubmitRequest,
    Submitted,
    VendorExpired,
    VendorRejected,
    VendorResultTooLarge,
    VendorTransient,
)
from service.vendors.http import (
    error_message,
    raise_for_transient,
    retry_after_seconds,
    submit_errors,
    transport_errors,
    unexpected_answer,
)

PARSE = "/api/v2/parse"
# Past this many bytes together, a result's parts are read from their presigned URLs rather than inline
# (rules.fetch_plan: "large" is not defined by the document).
INLINE_MAX_BYTES = 4 * 1024 * 1024
MAX_ASSET_BYTES = 50 * 1024 * 1024


class LlamaParseAdapter:
    name = "llamaparse"
    supports_cancel = True
    # No idempotency key is documented, and a retried POST creates a new job (§4.6).
    submit_idempotent = False

    def __init__(
        self,
        client: httpx.AsyncClient,
        *,
        fetcher: Fetcher | None = None,
        max_asset_bytes: int = MAX_ASSET_BYTES,
        inline_max_bytes: int = INLINE_MAX_BYTES,
    ) -> None:
        self._client = client
        self._fetcher = fetcher
        self._max_asset_bytes = max_asset_bytes
        self._inline_max_bytes = inline_max_bytes

    # Submit -------------------------------------------------------------------------------------

    async def submit(self, request: SubmitRequest, call: Call = NO_CALL) -> Submitted:
        config = rules.configuration(request.options, zero_retention=request.zero_retention)
        tier = config.get("tier")
        if tier not in rules.TIERS:  # the API validates the options; a caller without it, here
            raise VendorRejected(f"LlamaParse needs options.tier, one of {', '.join(rules.TIERS)}")
        doc = request.document
        if doc.url is not None:
            if not doc.url.startswith(("https://", "http://")):
                raise VendorRejected("LlamaParse takes a document by http(s) URL or by its bytes")
            with submit_errors():
                response = await self._client.post(
                    PARSE, json={**config, "source_url": doc.url}, extensions=call.extensions(Kind.SUBMIT)
                )
        else:
            if not doc.content:
                raise VendorRejected("the document is empty")
            with submit_errors():
                response = await self._client.post(
                    f"{PARSE}/upload",
                    files={"file": (doc.filename, doc.content, doc.media_type)},
                    data={"configuration": json.dumps(config)},
                    extensions=call.extensions(Kind.SUBMIT),
                )
        raise_for_transient(response)
        if not response.is_success:
            message = error_message(response)
            if rules.submit_refusal(response.status_code) == "transient":
                raise VendorTransient(f"HTTP {response.status_code}: {message}")
            raise VendorRejected(message, status_code=response.status_code)
        created = rules.created_job(_json(response))
        if created is None:
            # A 2xx that names no job may still have made one: never asked again.
            raise unexpected_answer(response, "a job id (id or job.id)")
        return Submitted(
            vendor_run_id=created.job_id,
            vendor_status=created.status,
            state={"tier": tier},
            retry_after_s=_retry_after(response),
        )

    # Poll ---------------------------------------------------------------------------------------

    async def poll(self, vendor_run_id: str, state: dict[str, Any], call: Call = NO_CALL) -> PollResult:
        response = await self._get(vendor_run_id, (), call, Kind.POLL)
        result = rules.poll_result(_json(response))
        if result is None:
            raise VendorTransient("the job's answer has no job.status")
        # "No Retry-After guidance is documented for polls (NOT FOUND)" (§4.4): one that comes is
        # honoured (the simulator plays both readings, llamaparse_retry_after).
        delay = _retry_after(response)
        return result if delay is None else dataclasses.replace(result, retry_after_s=delay)

    async def fetch_result(self, vendor_run_id: str, state: dict[str, Any], call: Call = NO_CALL) -> Any:
        parts = rules.parts_for(str(state.get("tier", "")))
        described = _json(
            await self._get(vendor_run_id, [f"{p}_content_metadata" for p in parts], call, Kind.FETCH)
        )
        stored = rules.stored_parts(described, parts)
        if stored is not None:
            total = sum(s.size for s in stored.values())
            if total > self._max_asset_bytes:
                raise VendorResultTooLarge(
                    f"the result is {total} bytes, more than the {self._max_asset_bytes} kept "
                    "(HOOKBRIDGE_MAX_DOCUMENT_BYTES)"
                )
        job = described.get("job") if isinstance(described, dict) else None
        values: dict[str, Any] = {}
        wanted = list(parts if stored is None else stored)
        if wanted and (self._fetcher is None or rules.fetch_plan(stored, self._inline_max_bytes) == "inline"):
            inline = _json(await self._get(vendor_run_id, wanted, call, Kind.FETCH))
            if isinstance(inline, dict):
                job = inline.get("job", job)
                values = {p: inline[p] for p in wanted if inline.get(p) is not None}
        for part in wanted:
            entry = (stored or {}).get(part)
            if part not in values and entry is not None and entry.url is not None:
                values[part] = rules.downloaded(await self._download(entry.url))
        if not isinstance(job, dict):
            raise VendorTransient("the job's answer has no job")
        return rules.result(job, values)

    async def _download(self, url: str) -> bytes:
        """A part from its presigned URL, with the host's fetcher (no key). "Expiry of presigned URLs ...:
        **NOT FOUND**" (§4.5): a URL refused (expired between the two requests, or a storage fault) is
        transient, so that the fetch is tried again from the metadata, which gives fresh URLs."""
        if self._fetcher is None:  # never: the inline path is taken without a fetcher
            raise VendorTransient("no fetcher for a presigned URL")
        try:
            return await self._fetcher.fetch(url)
        except DocumentTooLarge as exc:
            raise VendorResultTooLarge(f"a part of the result is too large: {exc.message}") from exc
        except DocumentUnavailable as exc:
            raise VendorTransient(f"a presigned result URL was refused: {exc.message}") from exc

    async def _get(self, vendor_run_id: str, expand: Any, call: Call, kind: Kind) -> httpx.Response:
        """GET the job (with ``expand``, repeated as the SDK sends it); an answer that is not a JSON
        object is transient."""
        params = {"expand": list(expand)} if expand else None
        with transport_errors():
            response = await self._client.get(
                _job_path(vendor_run_id), params=params, extensions=call.extensions(kind)
            )
        raise_for_transient(response)
        if not response.is_success:
            verdict = rules.poll_refusal(response.status_code)
            message = error_message(response)
            if verdict == "rejected":
                raise VendorRejected(message, status_code=response.status_code)
            if verdict == "expired":
                raise VendorExpired(message, status_code=response.status_code)
            raise VendorTransient(f"HTTP {response.status_code}: {message}", status_code=response.status_code)
        if not isinstance(_json(response), dict):
            raise VendorTransient("the job's answer is not a JSON object")
        return response

    # Cancel and delete --------------------------------------------------------------------------

    async def cancel(self, vendor_run_id: str, state: dict[str, Any], call: Call = NO_CALL) -> None:
        with transport_errors():
            response = await self._client.post(
                f"{_job_path(vendor_run_id)}/cancel", extensions=call.extensions(Kind.CANCEL)
            )
        raise_for_transient(response)
        if not response.is_success and rules.cancel_refusal(response.status_code) == "rejected":
            raise VendorRejected(error_message(response), status_code=response.status_code)

    async def delete(self, vendor_run_id: str, state: dict[str, Any], call: Call = NO_CALL) -> None:
        """Deletes the job at LlamaParse, canceling it first where it is not terminal; gone is fine, once
        a GET confirms it."""
        response = await self._delete(vendor_run_id, call)
        verdict = None if response.is_success else rules.delete_refusal(response.status_code)
        if verdict == "cancel_first":
            await self.cancel(vendor_run_id, state, call)
            response = await self._delete(vendor_run_id, call)
            verdict = None if response.is_success else rules.delete_refusal(response.status_code)
        if verdict is None:
            return
        if verdict == "confirm" and await self._gone(vendor_run_id, call):
            return
        raise VendorRejected(
            f"not deleted: HTTP {response.status_code}: {error_message(response)}",
            status_code=response.status_code,
        )

    async def _delete(self, vendor_run_id: str, call: Call) -> httpx.Response:
        with transport_errors():
            response = await self._client.delete(
                _job_path(vendor_run_id), extensions=call.extensions(Kind.DELETE)
            )
        raise_for_transient(response)
        return response

    async def _gone(self, vendor_run_id: str, call: Call) -> bool:
        try:
            await self._get(vendor_run_id, (), call, Kind.DELETE)
        except VendorExpired:
            return True
        return False


def _job_path(vendor_run_id: str) -> str:
    return f"{PARSE}/{quote(vendor_run_id, safe='')}"


def _retry_after(response: httpx.Response) -> float | None:
    return retry_after_seconds(response.headers.get("retry-after"))


def _json(response: httpx.Response) -> Any:
    try:
        return response.json()
    except ValueError:
        return None


def build(client: httpx.AsyncClient, extra: Mapping[str, Any]) -> LlamaParseAdapter:
    fetcher = extra.get("fetcher")
    return LlamaParseAdapter(
        client,
        fetcher=fetcher if isinstance(fetcher, Fetcher) else None,
        max_asset_bytes=int(extra.get("max_asset_bytes", MAX_ASSET_BYTES)),
    )
