"""The object storage that the simulated Textract reads (S3) and the simulated Document AI reads and writes
(GCS): two real emulators, run inside the simulator's process, each on a loopback port of its own.

- S3: moto's own server (``moto.server.ThreadedMotoServer``, its werkzeug app in a thread). moto's
  backends are process-global, so every simulator in one process sees the same buckets.
- GCS: ``gcp-storage-emulator`` in memory (``create_server(..., in_memory=True)``, a stdlib HTTP server in
  a thread).

Neither can be mounted in the Starlette app (the GCS emulator is a stdlib ``HTTPServer``; moto's app
dispatches on the whole host and path), so each listens on a loopback port of its own, and the
simulator's own port forwards ``/s3/...`` and ``/gcs/...`` to them (:func:`proxy`), streaming both ways:
``boto3.client("s3", endpoint_url=SIM + "/s3")`` and ``storage.Client(client_options={"api_endpoint":
SIM + "/gcs"})`` work, and so do the emulators' own URLs, which ``GET /_sim/storage`` lists.

They start when first needed (``GET /_sim/storage``, ``/s3``, ``/gcs``, or a Textract or Document AI
request), so that the many simulators the other tests start pay nothing (moto's import alone takes
about 1.7 s); with a fixed ``s3_port`` or ``gcs_port`` they start with the app's lifespan, since a
client may then connect without asking. The lifespan stops them.

The simulated vendors talk to the emulators over their HTTP APIs, as the real services would to S3 and
GCS: S3 requests are signed with botocore's SigV4 signer (moto refuses anonymous reads of a private
bucket), GCS requests go to the JSON API unauthenticated (the emulator checks no token).
"""

from __future__ import annotations

import asyncio
import json
import urllib.parse
from dataclasses import dataclass
from typing import Any

import httpx
import structlog
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

log = structlog.get_logger(__name__)

# Bounded reads: the simulated vendors need the first bytes (format sniffing, outcome markers) and sizes.
SAMPLE_BYTES = 64 * 1024
_TIMEOUT = httpx.Timeout(10.0)
_BOUNDARY = "hookbridge-sim-boundary"


class StorageDown(Exception):
    """The emulators are not running (no lifespan, or the packages are not installed)."""


@dataclass(frozen=True)
class ObjectSample:
    size: int
    head: bytes
    content_type: str | None


class Storage:
    """Both emulators: started and stopped by the simulator app's lifespan."""

    def __init__(
        self, *, s3_port: int, gcs_port: int, access_key: str, secret_key: str, buckets: tuple[str, ...] = ()
    ) -> None:
        self._buckets = buckets
        self._s3_port, self._gcs_port = s3_port, gcs_port
        self._access_key, self._secret_key = access_key, secret_key
        self._moto: Any = None
        self._gcs: Any = None
        self.s3_url: str | None = None
        self.gcs_url: str | None = None
        self.client = httpx.AsyncClient(timeout=_TIMEOUT)
        self._lock = asyncio.Lock()
        self._started = False

    async def ensure_started(self) -> None:
        """Starts both emulators once, off the event loop."""
        async with self._lock:
            if not self._started:
                await asyncio.to_thread(self.start)
                self._started = True

    def start(self) -> None:
        try:
            from gcp_storage_emulator.server import create_server
            from moto.server import ThreadedMotoServer
        except ImportError as exc:  # the production image ships without them
            log.warning("simulator_storage_unavailable", reason=str(exc))
            return
        self._moto = ThreadedMotoServer(ip_address="127.0.0.1", port=self._s3_port, verbose=False)
        self._moto.start()
        host, port = self._moto.get_host_and_port()
        self.s3_url = f"http://{host}:{port}"
        self._gcs = create_server("127.0.0.1", self._gcs_port, in_memory=True)
        self._gcs.start()
        self.gcs_url = f"http://127.0.0.1:{self._gcs._api._httpd.server_address[1]}"
        self._make_buckets()
        log.info("simulator_storage_started", s3=self.s3_url, gcs=self.gcs_url)

    def _make_buckets(self) -> None:
        """``storage_buckets``, in both emulators (in the starting thread: the loop is not blocked)."""
        with httpx.Client(timeout=_TIMEOUT) as client:
            for bucket in self._buckets:
                url = f"{self.s3_url}/{urllib.parse.quote(bucket)}"
                s3 = client.put(url, headers=self._s3_headers("PUT", url, {}))
                gcs = client.post(
                    f"{self.gcs_url}/storage/v1/b", params={"project": "simulator"}, json={"name": bucket}
                )
                if s3.status_code != 200 or gcs.status_code not in (200, 409):
                    # A bad name is the caller's to see in the log; the emulators still serve.
                    log.warning(
                        "simulator_bucket_not_made", bucket=bucket, s3=s3.status_code, gcs=gcs.status_code
                    )

    async def stop(self) -> None:
        await self.client.aclose()
        # Each waits up to half a second for its serve_forever loop: off the event loop.
        if self._moto is not None:
            await asyncio.to_thread(self._moto.stop)
        if self._gcs is not None:
            await asyncio.to_thread(self._gcs.stop)
        self._moto = self._gcs = self.s3_url = self.gcs_url = None

    def to_json(self) -> dict[str, str | None]:
        return {"s3": self.s3_url, "gcs": self.gcs_url}

    # S3 -----------------------------------------------------------------------------------------------

    def _s3_headers(self, method: str, url: str, headers: dict[str, str]) -> dict[str, str]:
        from botocore.auth import SigV4Auth
        from botocore.awsrequest import AWSRequest
        from botocore.credentials import Credentials

        request = AWSRequest(method=method, url=url, headers=headers)
        SigV4Auth(Credentials(self._access_key, self._secret_key), "s3", "us-east-1").add_auth(request)
        return dict(request.headers.items())

    async def s3_sample(self, bucket: str, key: str, version: str | None = None) -> ObjectSample | None:
        """The object's size and first bytes; None when there is no such bucket, key or version."""
        await self.ensure_started()
        if self.s3_url is None:
            raise StorageDown("S3 emulator not running")
        url = f"{self.s3_url}/{urllib.parse.quote(bucket)}/{urllib.parse.quote(key)}"
        if version is not None:
            url += "?versionId=" + urllib.parse.quote(version)
        headers = self._s3_headers("GET", url, {"Range": f"bytes=0-{SAMPLE_BYTES - 1}"})
        response = await self.client.get(url, headers=headers)
        if response.status_code in (403, 404, 400):
            return None
        response.raise_for_status()
        size = _total_size(response)
        return ObjectSample(
            size=size, head=response.content, content_type=response.headers.get("content-type")
        )

    # GCS ----------------------------------------------------------------------------------------------

    async def _gcs_base(self) -> str:
        await self.ensure_started()
        if self.gcs_url is None:
            raise StorageDown("GCS emulator not running")
        return self.gcs_url

    async def gcs_sample(self, bucket: str, name: str) -> ObjectSample | None:
        base = await self._gcs_base()
        url = f"{base}/storage/v1/b/{_q(bucket)}/o/{_q(name)}?alt=media"
        response = await self.client.get(url, headers={"Range": f"bytes=0-{SAMPLE_BYTES - 1}"})
        if response.status_code == 404:
            return None
        response.raise_for_status()
        return ObjectSample(
            size=_total_size(response), head=response.content[:SAMPLE_BYTES], content_type=None
        )

    async def gcs_list(self, bucket: str, prefix: str, limit: int) -> list[str] | None:
        """Names under ``prefix`` (at most ``limit``, in the API's order); None when the bucket is missing."""
        base, token = await self._gcs_base(), None
        names: list[str] = []
        while len(names) < limit:
            params = {"prefix": prefix, "maxResults": str(min(1000, limit - len(names)))}
            if token:
                params["pageToken"] = token
            response = await self.client.get(f"{base}/storage/v1/b/{_q(bucket)}/o", params=params)
            if response.status_code == 404:
                return None
            response.raise_for_status()
            body = response.json()
            names += [item["name"] for item in body.get("items", [])]
            token = body.get("nextPageToken")
            if not token:
                break
        return names[:limit]

    async def gcs_put_json(self, bucket: str, name: str, document: dict[str, Any]) -> bool:
        """Writes one JSON object (a multipart upload, as Google's client does); False when the bucket is
        missing."""
        meta = json.dumps({"name": name, "contentType": "application/json"}).encode()
        data = json.dumps(document, separators=(",", ":")).encode()
        body = b"".join(
            (
                f"--{_BOUNDARY}\r\nContent-Type: application/json; charset=UTF-8\r\n\r\n".encode(),
                meta,
                f"\r\n--{_BOUNDARY}\r\nContent-Type: application/json\r\n\r\n".encode(),
                data,
                f"\r\n--{_BOUNDARY}--\r\n".encode(),
            )
        )
        response = await self.client.post(
            f"{await self._gcs_base()}/upload/storage/v1/b/{_q(bucket)}/o",
            params={"uploadType": "multipart"},
            content=body,
            headers={"Content-Type": f"multipart/related; boundary={_BOUNDARY}"},
        )
        if response.status_code == 404:
            return False
        response.raise_for_status()
        return True


_HOP_BY_HOP = frozenset(
    ("host", "connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade", "proxy-connection")
)


async def proxy(request: Request) -> Response:
    """``/s3/{path}`` and ``/gcs/{path}``: the request forwarded to that emulator, streamed both ways."""
    storage: Storage = request.app.state.storage
    await storage.ensure_started()
    which, _, rest = request.url.path.lstrip("/").partition("/")
    base = storage.s3_url if which == "s3" else storage.gcs_url
    if base is None:
        return Response(
            "storage emulator not running (pip install 'hookbridge[embedded]')\n", status_code=503
        )
    url = f"{base}/{rest}"
    if request.url.query:
        url += "?" + request.url.query
    headers = [(k, v) for k, v in request.headers.items() if k.lower() not in _HOP_BY_HOP]
    has_body = "content-length" in request.headers or "transfer-encoding" in request.headers
    upstream = storage.client.build_request(
        request.method, url, headers=headers, content=request.stream() if has_body else None
    )
    answer = await storage.client.send(upstream, stream=True)
    return StreamingResponse(
        answer.aiter_raw(),
        status_code=answer.status_code,
        headers={k: v for k, v in answer.headers.items() if k.lower() not in _HOP_BY_HOP},
        background=BackgroundTask(answer.aclose),
    )


def _q(part: str) -> str:
    return urllib.parse.quote(part, safe="")


def _total_size(response: httpx.Response) -> int:
    content_range = response.headers.get("content-range", "")
    if "/" in content_range:
        total = content_range.rsplit("/", 1)[1]
        if total.isdigit():
            return int(total)
    return len(response.content)


def parse_gs_uri(uri: Any) -> tuple[str, str] | None:
    """(bucket, object) of a ``gs://bucket/object`` URI; None for anything else."""
    if not isinstance(uri, str) or not uri.startswith("gs://"):
        return None
    bucket, _, name = uri[5:].partition("/")
    if not bucket or "/" in bucket:
        return None
    return bucket, name
