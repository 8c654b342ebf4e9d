"""Google Cloud for the adapters that need it (Document AI): OAuth2 access tokens from google-auth inside an
``httpx.Auth``, and a small client of the Cloud Storage JSON API.

google-auth mints the tokens: Application Default Credentials (``GOOGLE_APPLICATION_CREDENTIALS``, a
workload identity on GKE, the metadata server on GCE) or a service-account key file whose ``token_uri``
it honours (so a local token endpoint, the simulator's, can stand in for Google's). Its refresh is
synchronous (``requests``), so it runs in a thread; the event loop only reads a token that is still valid
(``credentials.valid``: google-auth counts a token as expired a few minutes early).

Why not google-cloud-storage: it is synchronous (every call would be a thread) and reads whole objects;
the JSON API over hookbridge's httpx reads a shard bounded, and the four calls needed (upload, list, read,
delete) are each one request.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, AsyncIterator, Generator
from typing import Any
from urllib.parse import quote

import httpx

from service.vendors import text
from service.vendors.base import VendorRejected, VendorResultTooLarge, VendorTransient
from service.vendors.http import error_message, transport_errors

CLOUD_PLATFORM = "https://www.googleapis.com/auth/cloud-platform"
DEFAULT_GCS_BASE_URL = "https://storage.googleapis.com"


class GoogleTokens:
    """Access tokens for ``scopes`` from a key file (``credentials_file``) or ADC, refreshed off the loop."""

    def __init__(self, credentials_file: str = "", scopes: tuple[str, ...] = (CLOUD_PLATFORM,)) -> None:
        self._file = credentials_file
        self._scopes = list(scopes)
        self._credentials: Any = None
        self._lock = asyncio.Lock()

    async def token(self, *, force: bool = False) -> str:
        credentials = self._credentials
        if not force and credentials is not None and credentials.valid:
            return str(credentials.token)
        async with self._lock:
            if self._credentials is None:
                self._credentials = await asyncio.to_thread(self._load)
            if force or not self._credentials.valid:
                await asyncio.to_thread(self._refresh, self._credentials)
                # Scrubbed from whatever a vendor answers, before it is sent (the last few kept).
                text.rotate(f"google-{id(self)}", str(self._credentials.token))
            return str(self._credentials.token)

    def _load(self) -> Any:
        import google.auth
        from google.auth.exceptions import DefaultCredentialsError
        from google.oauth2 import service_account

        if self._file:
            try:
                load = service_account.Credentials.from_service_account_file
                return load(self._file, scopes=self._scopes)  # type: ignore[no-untyped-call]
            except (OSError, ValueError) as exc:
                raise VendorRejected(
                    f"GOOGLE_DOCAI_CREDENTIALS_FILE cannot be used: {type(exc).__name__}"
                ) from None
        try:
            credentials, _ = google.auth.default(scopes=self._scopes)
        except DefaultCredentialsError:
            raise VendorRejected(
                "no Google credentials: set HOOKBRIDGE_GOOGLE_DOCAI_CREDENTIALS_FILE, "
                "GOOGLE_APPLICATION_CREDENTIALS or run with a workload identity"
            ) from None
        return credentials

    @staticmethod
    def _refresh(credentials: Any) -> None:
        import google.auth.transport.requests
        from google.auth.exceptions import RefreshError, TransportError

        try:
            credentials.refresh(google.auth.transport.requests.Request())
        except TransportError as exc:
            raise VendorTransient(
                f"the Google token endpoint cannot be reached: {type(exc).__name__}"
            ) from None
        except RefreshError as exc:
            # The token endpoint refused the grant (a revoked key, a wrong audience): no retry mends it.
            raise VendorRejected(
                f"the Google token endpoint refused the credentials: {_first(exc)}"
            ) from None


def _first(exc: Exception) -> str:
    return " ".join(str(exc.args[0] if exc.args else exc).split())[:200]


class GoogleAuth(httpx.Auth):
    """``Authorization: Bearer`` with a token from :class:`GoogleTokens`; a 401 refreshes it once."""

    def __init__(self, tokens: GoogleTokens) -> None:
        self.tokens = tokens

    def sync_auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        raise RuntimeError("GoogleAuth serves async requests only (tokens are refreshed off the event loop)")

    async def async_auth_flow(self, request: httpx.Request) -> AsyncGenerator[httpx.Request, httpx.Response]:
        request.headers["Authorization"] = f"Bearer {await self.tokens.token()}"
        response = yield request
        if response.status_code == 401:
            await response.aread()
            request.headers["Authorization"] = f"Bearer {await self.tokens.token(force=True)}"
            yield request


def parse_gs_url(url: str) -> tuple[str, str] | None:
    """(bucket, object) of ``gs://bucket/object``; None for anything else (or no object)."""
    if not url.startswith("gs://"):
        return None
    bucket, _, name = url[5:].partition("/")
    if not bucket or not name:
        return None
    return bucket, name


def parse_gs_prefix(url: str) -> tuple[str, str] | None:
    """(bucket, prefix) of ``gs://bucket/`` or ``gs://bucket/folder/``; None for anything else."""
    if not url.startswith("gs://") or not url.endswith("/"):
        return None
    bucket, _, prefix = url[5:].partition("/")
    return (bucket, prefix) if bucket else None


class GcsObjects:
    """The Cloud Storage JSON API at ``base_url`` (``GOOGLE_DOCAI_GCS_BASE_URL``: the API's root, without
    ``/storage/v1``). ``session()`` opens the connections that one operation of the adapter uses (a
    staging, a fetch, a deletion) and closes them after it: nothing stays open between runs."""

    def __init__(self, auth: httpx.Auth, base_url: str = "", timeout_s: float = 30.0) -> None:
        self._base = (base_url or DEFAULT_GCS_BASE_URL).rstrip("/")
        self._auth = auth
        self._timeout = httpx.Timeout(timeout_s)

    @contextlib.asynccontextmanager
    async def session(self) -> AsyncIterator[GcsSession]:
        async with httpx.AsyncClient(auth=self._auth, timeout=self._timeout, follow_redirects=False) as c:
            yield GcsSession(c, self._base)


class GcsSession:
    """Upload, list, read (bounded) and delete objects over one client."""

    def __init__(self, client: httpx.AsyncClient, base: str) -> None:
        self.client = client
        self._base = base

    def _object(self, bucket: str, name: str) -> str:
        return f"{self._base}/storage/v1/b/{_q(bucket)}/o/{_q(name)}"

    async def put(self, bucket: str, name: str, content: bytes, media_type: str) -> None:
        with transport_errors():
            response = await self.client.post(
                f"{self._base}/upload/storage/v1/b/{_q(bucket)}/o",
                params={"uploadType": "media", "name": name},
                content=content,
                headers={"Content-Type": media_type},
            )
        _check(response, f"staging gs://{bucket}/{name}")

    async def names(self, bucket: str, prefix: str, limit: int = 100_000) -> AsyncIterator[str]:
        """The object names under ``prefix``, page by page (the API's lexicographic order)."""
        token: str | None = None
        seen = 0
        while True:
            params = {"prefix": prefix}
            if token:
                params["pageToken"] = token
            with transport_errors():
                response = await self.client.get(f"{self._base}/storage/v1/b/{_q(bucket)}/o", params=params)
            _check(response, f"listing gs://{bucket}/{prefix}")
            body = response.json()
            for item in body.get("items") or []:
                seen += 1
                if seen > limit:
                    raise VendorTransient(f"more than {limit} objects under gs://{bucket}/{prefix}")
                yield str(item["name"])
            token = body.get("nextPageToken")
            if not token:
                return

    async def read(self, bucket: str, name: str, limit: int) -> bytes:
        """The object's bytes, no more than ``limit`` (VendorResultTooLarge past it)."""
        with transport_errors():
            async with self.client.stream("GET", self._object(bucket, name), params={"alt": "media"}) as r:
                if not r.is_success:
                    await r.aread()
                    _check(r, f"reading gs://{bucket}/{name}")
                chunks: list[bytes] = []
                size = 0
                async for chunk in r.aiter_bytes():
                    size += len(chunk)
                    if size > limit:
                        raise VendorResultTooLarge(f"the result is larger than {limit} bytes")
                    chunks.append(chunk)
        return b"".join(chunks)

    async def delete(self, bucket: str, name: str) -> bool:
        """Deletes one object; True if it was there, False if it was already gone."""
        with transport_errors():
            response = await self.client.delete(self._object(bucket, name))
        if response.status_code == 404:
            return False
        _check(response, f"deleting gs://{bucket}/{name}")
        return True


def _q(part: str) -> str:
    return quote(part, safe="")


def _check(response: httpx.Response, doing: str) -> None:
    if response.is_success:
        return
    message = f"{doing}: HTTP {response.status_code}: {error_message(response)}"
    if response.status_code == 429 or response.status_code >= 500:
        raise VendorTransient(message, status_code=response.status_code)
    raise VendorRejected(message, status_code=response.status_code)
