"""What the cloud adapters share about staging a document before the vendor's submit."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from service.vendors.base import VendorRejected, VendorTransient


@asynccontextmanager
async def before_submit(timeout_s: float) -> AsyncIterator[None]:
    """Bounds the staging (a token, a document fetched, an object written) by ``timeout_s``, below the
    worker's step timeout, and makes its faults say that nothing reached the vendor: a transient one
    without the transport error under it, which the worker would take for a submit that may have been
    received (``decide.submit_fault``). A document refused for good stays what it is."""
    try:
        async with asyncio.timeout(timeout_s):
            yield
    except VendorRejected:
        raise
    except VendorTransient as exc:
        raise VendorTransient(f"staging the document: {exc.message}", status_code=exc.status_code) from None
    except TimeoutError:
        raise VendorTransient(f"staging the document took more than {timeout_s:g} s") from None


def endpoint_override(raw: str) -> str:
    """A setting that replaces a cloud API's root (the S3 or Cloud Storage endpoint): empty, or an
    http(s) URL without its trailing slash."""
    value = raw.strip().rstrip("/")
    if value and not value.startswith(("http://", "https://")):
        raise ValueError("must be an http(s) URL")
    return value
