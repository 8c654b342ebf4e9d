"""Nutrient DWS Data Extraction, async runs (shared/vendors/nutrient-run-asynchronously.md).

Submit ``POST /extraction/{operation}/async`` in the synchronous endpoint's request format (S003): a file
goes as multipart, ``file`` plus an ``instructions`` part holding the instructions as a JSON string; a URL
goes as a JSON body whose instruction fields sit at the top level beside ``url`` (``{"url": ..., "mode":
"text"}``, NU-parse), never nested under ``instructions`` (the API would not read them there: a parse would
fall back to its default mode, 9 credits a page instead of 1 for ``text``). ``Idempotency-Key`` is our run
id, so a submit retried after a crash returns the same vendor run.

Poll ``GET /extraction/runs/{id}``; on ``done`` its ``usage.data_extraction_credits.cost`` is what the run
cost. Fetch ``/assets/result`` only when ``done``; a split with ``zip`` or ``both`` output also has a ``zip``
asset named by ``output.downloadUrl``, fetched with our key (only from Nutrient's own host), both bounded
by ``max_asset_bytes``. Cancel with ``POST /extraction/runs/{id}/cancel``. Delete with ``DELETE
/extraction/runs/{id}`` (the path is an inference, NOTES.md §2.5): an in-flight run answers 409
``run_in_flight`` and is canceled first, as S003 says.

Rules and the sentences they rest on (S003):

- ``submit_idempotent = True``: "Retrying the same request with the same key returns HTTP 202 without
  creating another run."
- Polls from 2 s doubling to 30 s: "Wait at least two seconds between polling requests" and the example's
  ``Math.min(delay * 2, 30000)``; ``max_run_s`` 1800 is above "a 15-minute processing limit".
- 401/403 on a poll or an asset end the run (``vendor_rejected``): not documented for the poll; a refused
  key stays refused, so asking again only spends the shared rate limit.
- "Poll the run until its status is done, error, or canceled": an answer without ``status`` is a
  transient fault (not documented; it says nothing of the run).
- Delete: only a 2xx or 410 ``run_expired`` ("The run has passed its retention window") is a deletion.
  Not documented: the route; so a 404 or 405 (a route that does not exist answers so) is "not deleted".
- ``output.downloadUrl`` "points to" the zip asset; its host is not documented. Our key goes only to
  Nutrient's own origin. A URL elsewhere (a presigned storage URL, which carries its own credential) is
  fetched without our key, under the callback address rules and ``MAX_DOCUMENT_BYTES``
  (``service.delivery.fetch``); an adapter built without that fetcher reads the run's ``/assets/zip``
  instead.
- URL input: "For URLs whose content can change, retain the run ID from the first HTTP 202 response ...
  Alternatively, upload the file." A lost 202 gives no run id, and no lookup of a run by key is
  documented, so we upload: the worker fetches the URL once (``fetch_document``: the callback address
  rules, ``MAX_DOCUMENT_BYTES``, streamed), keeps the bytes as a bytes submit keeps them (the run's
  document key) and submits those with the Idempotency-Key on every try. A replay then carries the same
  bytes, so Nutrient answers with the first run, even if the URL has since changed (which would be a 409)
  or gone (the submit would fail). ``HOOKBRIDGE_NUTRIENT_URL_INPUT=send`` hands the URL to Nutrient
  instead (the JSON format), for URLs whose content never changes, which the document's advice does not
  cover ("For URLs whose content can change"); the benchmarks use it, their URLs being placeholders.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

import httpx
from pydantic import BaseModel, ConfigDict, Field

from service.vendors.base import (
    CANCELED,
    FAILED,
    NO_CALL,
    QUEUED,
    RUNNING,
    SUCCEEDED,
    Call,
    DocumentTooLarge,
    DocumentUnavailable,
    Fetcher,
    FileResult,
    Kind,
    PollResult,
    Progress,
    SubmitRequest,
    Submitted,
    VendorDefaults,
    VendorExpired,
    VendorRejected,
    VendorResultTooLarge,
    VendorSetting,
    VendorSpec,
    VendorTransient,
)
from service.vendors.http import (
    error_message,
    get_bounded,
    raise_for_transient,
    same_origin,
    transport_errors,
)

# What hookbridge keeps of a result asset when not told otherwise (the worker passes MAX_DOCUMENT_BYTES).
MAX_ASSET_BYTES = 50 * 1024 * 1024
# Request fields that are not instructions: the document itself.
_DOCUMENT_FIELDS = ("url", "assetId", "file")

STATUSES = {"queued": QUEUED, "running": RUNNING, "done": SUCCEEDED, "error": FAILED, "canceled": CANCELED}


class NutrientAdapter:
    name = "nutrient"
    supports_cancel = True
    # "Retrying the same request with the same key returns HTTP 202 without creating another run" (S003):
    # a submit that may have queued a run is sent again with the same Idempotency-Key (our run id).
    submit_idempotent = True

    def __init__(
        self,
        client: httpx.AsyncClient,
        *,
        max_asset_bytes: int = MAX_ASSET_BYTES,
        fetcher: Fetcher | None = None,
        url_input: str = "upload",
    ) -> None:
        self._client = client
        self._max_asset_bytes = max_asset_bytes
        self._fetcher = fetcher
        # The worker uploads a URL input's bytes (fetch_document) unless told to send the URL itself.
        self.uploads_url_input = url_input == "upload"

    async def fetch_document(self, url: str) -> bytes:
        """A URL input's bytes, fetched once by the worker and uploaded on every try (module docstring:
        "Alternatively, upload the file", S003)."""
        if self._fetcher is None:
            raise VendorRejected("this Nutrient adapter was built without a document fetcher")
        return await self._fetcher.fetch(url)

    async def submit(self, request: SubmitRequest, call: Call = NO_CALL) -> Submitted:
        instructions = request.options.get("instructions")
        if instructions is not None and not isinstance(instructions, dict):
            raise VendorRejected("options.instructions must be a JSON object")
        clash = sorted(set(instructions or {}) & set(_DOCUMENT_FIELDS))
        if clash:
            raise VendorRejected(f"options.instructions must not carry the document ({', '.join(clash)})")
        headers = {"Idempotency-Key": request.run_id}
        path = f"/extraction/{request.operation}/async"
        doc = request.document
        # Idempotent (S003): a submit that may have reached Nutrient is replayed with the same key, so a
        # fault after sending is an ordinary transient one here.
        with transport_errors():
            if doc.url is not None:
                # The JSON format: instruction fields at the top level beside the URL.
                body: dict[str, Any] = {**(instructions or {}), "url": doc.url}
                response = await self._client.post(
                    path, json=body, headers=headers, extensions=call.extensions(Kind.SUBMIT)
                )
            else:
                data = {"instructions": json.dumps(instructions)} if instructions is not None else None
                files = {"file": (doc.filename, doc.content or b"", doc.media_type)}
                response = await self._client.post(
                    path, files=files, data=data, headers=headers, extensions=call.extensions(Kind.SUBMIT)
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

    async def poll(self, vendor_run_id: str, state: dict[str, Any], call: Call = NO_CALL) -> PollResult:
        with transport_errors():
            response = await self._client.get(
                f"/extraction/runs/{vendor_run_id}", extensions=call.extensions(Kind.POLL)
            )
        self._check(response)
        run = response.json()
        raw_status = run.get("status") if isinstance(run, dict) else None
        if not isinstance(raw_status, str) or not raw_status:
            # "Poll the run until its status is done, error, or canceled" (S003): an answer without one
            # says nothing; a transient fault, never a status named "None".
            raise VendorTransient("the run answer has no status")
        vendor_status = raw_status
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
        return PollResult(
            status,
            vendor_status,
            progress=progress,
            needs_fetch=status == SUCCEEDED,
            usage=_usage(run.get("usage")) if status == SUCCEEDED else None,
        )

    async def fetch_result(self, vendor_run_id: str, state: dict[str, Any], call: Call = NO_CALL) -> Any:
        """The ``result`` asset (JSON); with a ``zip`` asset beside it, a :class:`FileResult` of both whose
        ``downloadUrl`` is ours (:func:`_shaped`)."""
        run_path = f"/extraction/runs/{quote(vendor_run_id, safe='')}"
        response, body = await get_bounded(
            self._client, f"{run_path}/assets/result", limit=self._max_asset_bytes, call=call
        )
        self._check(response)
        try:
            result = json.loads(body)
        except ValueError as exc:
            raise VendorTransient("the result asset is not JSON") from exc
        output = result.get("output") if isinstance(result, dict) else None
        download = output.get("downloadUrl") if isinstance(output, dict) else None
        if not isinstance(download, str) or not download:
            return result
        own = self._own_url(download, f"{run_path}/assets/zip")
        if own != download and self._fetcher is not None and _is_absolute_http(download):
            # A presigned URL elsewhere: fetched without our key, under the callback address rules.
            try:
                content = await self._fetcher.fetch(download)
            except DocumentTooLarge as exc:
                raise VendorResultTooLarge(exc.message) from None
            except DocumentUnavailable as exc:
                if exc.status_code is None:  # an address we never fetch: the vendor named it
                    raise VendorRejected(f"the zip asset's downloadUrl: {exc.message}") from None
                # A presigned URL may have expired: the result asset, read again, names a fresh one.
                raise VendorTransient(f"the zip asset: {exc.message}", status_code=exc.status_code) from None
            return _shaped(result, content, call)
        response, content = await get_bounded(self._client, own, limit=self._max_asset_bytes, call=call)
        self._check(response)
        return _shaped(result, content, call)

    async def delete(self, vendor_run_id: str, state: dict[str, Any], call: Call = NO_CALL) -> None:
        """Deletes the run at Nutrient; a run still in flight is canceled first (S003). Gone is fine."""
        path = f"/extraction/runs/{quote(vendor_run_id, safe='')}"
        with transport_errors():
            response = await self._client.delete(path, extensions=call.extensions(Kind.DELETE))
        if response.status_code == 409:  # run_in_flight: "Cancel the run before deleting it."
            await self.cancel(vendor_run_id, state, call)
            with transport_errors():
                response = await self._client.delete(path, extensions=call.extensions(Kind.DELETE))
        raise_for_transient(response)
        # 410 run_expired: "The run has passed its retention window" (S003), gone by itself. Anything else
        # that is not a 2xx, 404 and 405 included, is not a confirmed deletion: the route is an inference
        # (not documented), and a 404 may be a route that does not exist as well as a run that does not.
        if not response.is_success and response.status_code != 410:
            raise VendorRejected(
                f"not deleted: HTTP {response.status_code}: {error_message(response)}",
                status_code=response.status_code,
            )

    def _own_url(self, url: str, fallback: str) -> str:
        """``url`` if it is under Nutrient's own base URL (our key goes only there), else ``fallback``."""
        return url if same_origin(url, self._client.base_url) else fallback

    async def cancel(self, vendor_run_id: str, state: dict[str, Any], call: Call = NO_CALL) -> None:
        with transport_errors():
            response = await self._client.post(
                f"/extraction/runs/{vendor_run_id}/cancel", extensions=call.extensions(Kind.CANCEL)
            )
        raise_for_transient(response)
        # 409 run_not_cancelable: it finished first; 410: gone. Either way there is nothing to stop.
        if not response.is_success and response.status_code not in (409, 410):
            raise VendorRejected(error_message(response), status_code=response.status_code)

    @staticmethod
    def _check(response: httpx.Response) -> None:
        raise_for_transient(response)
        if response.status_code in (401, 403):
            # A refused key stays refused: the run ends at once (vendor_rejected), not after ten polls.
            raise VendorRejected(error_message(response), status_code=response.status_code)
        if response.status_code in (404, 410):
            raise VendorExpired(error_message(response), status_code=response.status_code)
        if not response.is_success:
            raise VendorTransient(f"HTTP {response.status_code}: {error_message(response)}")


def _shaped(result: dict[str, Any], content: bytes, call: Call) -> FileResult | dict[str, Any]:
    """The split's result as the client sees it: ``output.downloadUrl`` needs Nutrient's key, so it names
    hookbridge's copy instead (``call.result_url``); under zero retention nothing is kept, and the zip
    travels inline, base64 encoded, beside its media type. Outside a step (no ``result_url``) the
    vendor's answer is left as it came."""
    output = result.get("output")
    if not isinstance(output, dict):
        output = result["output"] = {}
    if call.zero_retention:
        output.pop("downloadUrl", None)
        output["file_base64"] = base64.b64encode(content).decode("ascii")
        output["file_media_type"] = "application/zip"
        return result
    if call.result_url:
        output["downloadUrl"] = call.result_url
    return FileResult(content=content, media_type="application/zip", data=result)


def _is_absolute_http(url: str) -> bool:
    try:
        parsed = httpx.URL(url)
    except httpx.InvalidURL:
        return False
    return parsed.scheme in ("http", "https") and bool(parsed.host)


def _usage(raw: Any) -> dict[str, Any] | None:
    """``{"credits", "reported"}`` from the run's ``usage``; None while it is empty."""
    if not isinstance(raw, dict) or not raw:
        return None
    credits = raw.get("data_extraction_credits")
    cost = credits.get("cost") if isinstance(credits, dict) else None
    number = float(cost) if isinstance(cost, int | float) and not isinstance(cost, bool) else None
    return {"credits": number, "reported": raw}


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
    fetcher = extra.get("fetcher")
    return NutrientAdapter(
        client,
        max_asset_bytes=int(extra.get("max_asset_bytes", MAX_ASSET_BYTES)),
        fetcher=fetcher if isinstance(fetcher, Fetcher) else None,
        url_input=str(extra.get("url_input", "upload")),
    )


def parse_url_input(raw: str) -> str:
    value = raw.strip().lower()
    if value not in ("upload", "send"):
        raise ValueError("upload (fetch the URL once and upload it) or send (Nutrient downloads it)")
    return value


class NutrientOptions(BaseModel):
    """A Nutrient run's ``options``."""

    model_config = ConfigDict(extra="forbid")

    instructions: dict[str, Any] | None = Field(
        None, description="The extraction's instruction fields, sent beside the document (e.g. `mode`)."
    )


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
        # "Polling and submission requests share a rate limit, so frequent polling reduces capacity for
        # new submissions. Frequent polling can exhaust a test key's limit within seconds." (S003) No
        # number is published. 5 a second, polls and submits together, keeps a burst of polls from
        # spending the shared limit before a 429 teaches it: with polls from 2 s growing to 30 s, 5/s
        # carries about 10 fresh runs polling at 2 s, or 150 runs at 30 s, and a submit waits at most its
        # turn in due order. Set it to the plan's own limit where it is known.
        max_rps=5.0,
    ),
    auth_headers=lambda key: {"Authorization": f"Bearer {key}"},
    build=_build,
    settings=(
        VendorSetting(
            "URL_INPUT",
            "upload",
            parse_url_input,
            description="a document URL: `upload` (fetched once under the callback address rules, "
            "uploaded on every try) or `send` (Nutrient downloads it on every try: URLs that never change)",
        ),
    ),
    description="Nutrient DWS Data Extraction, async runs",
    options=NutrientOptions,
    required=("API_KEY",),
)
