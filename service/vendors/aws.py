"""AWS for the adapters that need it (Textract): botocore's credential chain, its SigV4 signer inside an
``httpx.Auth``, its service models and its JSON serializer, and a small S3 object client.

Why botocore and not aiobotocore: the requests go through hookbridge's own httpx client (the vendor's
budget, metrics, answer cap and timeouts), so what is needed of AWS's library is the signer, the credential
chain, the service model and the serializer, which botocore has; aiobotocore pins botocore to a narrow range
(it would fight boto3's pin in the dev extra) and brings an aiohttp client of its own that none of the
budget would see.

botocore is synchronous where it touches the network: resolving the chain (a web identity token exchanged
with STS, the instance metadata service) and refreshing temporary credentials. :class:`AwsCredentials`
does both in a thread (``asyncio.to_thread``) and signs on the event loop only with credentials that need
no refresh (``RefreshableCredentials.refresh_needed()`` false), so no request blocks the loop.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
from collections.abc import AsyncGenerator, Generator, Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any
from urllib.parse import quote

import httpx

from service.vendors import text
from service.vendors.base import VendorRejected, VendorTransient
from service.vendors.http import error_message, transport_errors

# Headers of ours that are signed (besides Host, which botocore takes from the URL). The rest (User-Agent,
# Accept-Encoding, Connection...) may be changed by a proxy on the way and are left out of the signature.
_SIGNED = ("content-type", "x-amz-target", "content-md5")
_SET_BY_SIGNER = ("Authorization", "X-Amz-Date", "X-Amz-Security-Token", "X-Amz-Content-SHA256")


class NoCredentials(VendorRejected):
    """The standard chain found no AWS credentials (environment, shared files, web identity, container or
    instance role)."""


@dataclass(frozen=True)
class Frozen:
    access_key: str
    secret_key: str
    token: str | None


def region_of(configured: str, environ: Mapping[str, str] | None = None) -> str:
    """``TEXTRACT_REGION``, else ``AWS_REGION``, else ``AWS_DEFAULT_REGION`` (contract §10); "" if none."""
    env = os.environ if environ is None else environ
    return configured or env.get("AWS_REGION", "") or env.get("AWS_DEFAULT_REGION", "")


class AwsCredentials:
    """botocore's standard credential chain, resolved once and refreshed before expiry, off the loop."""

    def __init__(self, session: Any = None) -> None:
        self._session = session
        self._credentials: Any = None
        self._lock = asyncio.Lock()

    async def frozen(self) -> Frozen:
        credentials = self._credentials
        if credentials is not None and not _refresh_needed(credentials):
            return _freeze(credentials.get_frozen_credentials())
        async with self._lock:
            if self._credentials is None:
                self._credentials = await asyncio.to_thread(self._resolve)
            # A refresh (an STS call for web identity, IMDS for an instance role) happens here, in a thread.
            return _freeze(await asyncio.to_thread(self._credentials.get_frozen_credentials))

    def _resolve(self) -> Any:
        import botocore.session

        session = self._session or botocore.session.Session()
        try:
            found = session.get_credentials()
        except Exception as exc:  # botocore's chain raises its own errors (a broken profile, STS refusal)
            raise VendorTransient(f"AWS credentials could not be resolved: {type(exc).__name__}") from None
        if found is None:
            raise NoCredentials(
                "no AWS credentials: set AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, a web identity "
                "(AWS_ROLE_ARN + AWS_WEB_IDENTITY_TOKEN_FILE, as EKS IRSA sets them) or run with an "
                "instance role"
            )
        return found


def _refresh_needed(credentials: Any) -> bool:
    check = getattr(credentials, "refresh_needed", None)
    return bool(check()) if callable(check) else False


def _freeze(raw: Any) -> Frozen:
    return Frozen(raw.access_key, raw.secret_key, raw.token)


class SigV4(httpx.Auth):
    """Signs every request with SigV4 for ``service`` in ``region`` (botocore's signer), over the final
    method, URL, signed headers and body. ``s3`` uses botocore's S3 variant (its payload hash rules)."""

    requires_request_body = True

    def __init__(self, credentials: AwsCredentials, service: str, region: str) -> None:
        self.credentials = credentials
        self._service = service
        self._region = region
        self._slot = f"sigv4-{id(self)}"

    def sync_auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        raise RuntimeError("SigV4 signs async requests only (credentials are refreshed off the event loop)")

    async def async_auth_flow(self, request: httpx.Request) -> AsyncGenerator[httpx.Request, httpx.Response]:
        frozen = await self.credentials.frozen()
        if frozen.token:  # a session token is a bearer secret: scrubbed from whatever comes back
            text.rotate(self._slot, frozen.token)
        sign(request, frozen, self._service, self._region)
        yield request


def sign(request: httpx.Request, frozen: Frozen, service: str, region: str) -> None:
    """Adds SigV4's headers to ``request`` (its body must have been read)."""
    from botocore.auth import S3SigV4Auth, SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    headers = {k: v for k, v in request.headers.items() if k.lower() in _SIGNED}
    aws = AWSRequest(method=request.method, url=str(request.url), headers=headers, data=request.content)
    signer = S3SigV4Auth if service == "s3" else SigV4Auth
    signer(Credentials(frozen.access_key, frozen.secret_key, frozen.token), service, region).add_auth(aws)
    for name in _SET_BY_SIGNER:
        value = aws.headers.get(name)
        if value is not None:
            request.headers[name] = value


# Service models -------------------------------------------------------------------------------------


@lru_cache(maxsize=4)
def service_model(service: str) -> Any:
    """botocore's model of ``service`` (read once: its JSON is loaded from botocore's data)."""
    import botocore.session

    return botocore.session.get_session().get_service_model(service)


class RefusedByModel(VendorRejected):
    """A request that the service's own model refuses (botocore's ParamValidator): never sent."""


def serialize(service: str, operation: str, params: dict[str, Any]) -> tuple[bytes, dict[str, str]]:
    """The body and headers of ``operation`` with ``params``, as botocore sends them, after botocore's
    validation against the service model (an invalid request is :class:`RefusedByModel`)."""
    from botocore.exceptions import ParamValidationError
    from botocore.serialize import create_serializer

    model = service_model(service)
    op = model.operation_model(operation)
    # AWS JSON 1.1, the protocol the vendor documents (next-vendors.md §2.1). botocore >= 1.40 lists
    # ``smithy-rpc-v2-cbor`` first in ``protocols`` for Textract; the JSON one stays in the list.
    protocol = "json" if "json" in model.metadata.get("protocols", ["json"]) else model.metadata["protocol"]
    try:
        wire = create_serializer(protocol, include_validation=True).serialize_to_request(params, op)
    except ParamValidationError as exc:
        raise RefusedByModel(" ".join(str(exc).split())) from None
    body = wire["body"]
    return (body if isinstance(body, bytes) else str(body).encode()), dict(wire["headers"])


# S3 -------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class S3Location:
    bucket: str
    key: str


def parse_s3_url(url: str) -> S3Location | None:
    """``s3://bucket/key`` -> its location; None for anything else (or no key)."""
    if not url.startswith("s3://"):
        return None
    bucket, _, key = url[5:].partition("/")
    if not bucket or not key:
        return None
    return S3Location(bucket, key)


class S3Objects:
    """PUT and DELETE of single objects, signed for ``s3``. With ``endpoint_url`` (TEXTRACT_S3_ENDPOINT_URL:
    a MinIO, moto, a VPC endpoint) path-style URLs under it; else AWS's virtual-hosted style. A client (a
    connection) per call: a run stages once and deletes once, and nothing is left open between runs."""

    def __init__(
        self, credentials: AwsCredentials, region: str, endpoint_url: str = "", timeout_s: float = 30.0
    ) -> None:
        self._endpoint = endpoint_url.rstrip("/")
        self._region = region
        self._auth = SigV4(credentials, "s3", region or "us-east-1")
        self._timeout = httpx.Timeout(timeout_s)

    def url(self, location: S3Location) -> str:
        key = quote(location.key, safe="/~")
        if self._endpoint:
            return f"{self._endpoint}/{quote(location.bucket, safe='')}/{key}"
        return f"https://{location.bucket}.s3.{self._region}.amazonaws.com/{key}"

    def _client(self) -> httpx.AsyncClient:
        return httpx.AsyncClient(auth=self._auth, timeout=self._timeout, follow_redirects=False)

    async def put(self, location: S3Location, content: bytes, media_type: str) -> None:
        headers = {"Content-Type": media_type, "Content-MD5": _md5(content)}
        with transport_errors():
            async with self._client() as client:
                response = await client.put(self.url(location), content=content, headers=headers)
        _check(response, f"staging s3://{location.bucket}/{location.key}")

    async def delete(self, location: S3Location) -> None:
        """Deletes the object; S3 answers 204 whether or not it existed."""
        with transport_errors():
            async with self._client() as client:
                response = await client.delete(self.url(location))
        _check(response, f"deleting s3://{location.bucket}/{location.key}")


def _md5(content: bytes) -> str:
    import base64

    return base64.b64encode(hashlib.md5(content, usedforsecurity=False).digest()).decode()


def _check(response: httpx.Response, doing: str) -> None:
    if response.is_success:
        return
    message = f"{doing}: HTTP {response.status_code}: {error_message(response)}"
    if response.status_code in (429, 503) or response.status_code >= 500:
        raise VendorTransient(message, status_code=response.status_code)
    raise VendorRejected(message, status_code=response.status_code)
