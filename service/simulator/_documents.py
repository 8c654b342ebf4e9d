"""What a submitted document makes the simulated vendor do, and the deterministic result it yields.

Tests drive outcomes through hookbridge's own API, which only passes documents along, so the document is
the one channel they control: its filename, its URL and its first 64 bytes are searched (case-insensitive)
for a marker word.

- ``reject``: the submission itself is refused.
- ``billing``: Nutrient ends the run ``error`` with ``error.status`` 402, source ``billing`` (the other
  vendors have no billing failure and succeed).
- ``fail``: the run ends in the vendor's failure status with :data:`FAILURE_MESSAGE`.
- ``stuck``: the run never finishes processing.
- ``slow``: the run takes ten times its drawn duration; combines with any of the above.
- otherwise: success with fields derived from the SHA-256 of the document bytes.
"""

from __future__ import annotations

import base64
import binascii
import enum
import hashlib
from dataclasses import dataclass
from functools import cached_property

FAILURE_MESSAGE = "simulated failure: unreadable document"
REJECT_MESSAGE = "simulated rejection: the document was refused"
SLOW_FACTOR = 10.0
_SNIFF_BYTES = 64


class Ending(enum.Enum):
    SUCCESS = "success"
    FAIL = "fail"
    BILLING = "billing"
    STUCK = "stuck"


@dataclass(frozen=True)
class Outcome:
    reject: bool
    ending: Ending
    slow: bool


@dataclass(frozen=True)
class Document:
    """``content`` is the document's identity: its bytes, or for a URL input the URL itself."""

    content: bytes
    filename: str | None = None
    url: str | None = None
    media_type: str | None = None

    @cached_property
    def sha256(self) -> str:
        return hashlib.sha256(self.content).hexdigest()

    @cached_property
    def outcome(self) -> Outcome:
        haystack = " ".join(
            (self.filename or "", self.url or "", self.content[:_SNIFF_BYTES].decode("latin-1"))
        ).lower()
        if "billing" in haystack:
            ending = Ending.BILLING
        elif "fail" in haystack:
            ending = Ending.FAIL
        elif "stuck" in haystack:
            ending = Ending.STUCK
        else:
            ending = Ending.SUCCESS
        return Outcome(reject="reject" in haystack, ending=ending, slow="slow" in haystack)

    @property
    def pages(self) -> int:
        return 1 + int(self.sha256[14:16], 16) % 5

    @property
    def size(self) -> int:
        return len(self.content)

    def fields(self) -> dict[str, str | float | int]:
        """Flat scalar fields standing in for what an extraction engine would read off an invoice."""
        digest = self.sha256
        return {
            "invoice_number": f"INV-{digest[:6]}",
            "total": int(digest[6:14], 16) % 1_000_000 / 100,
            "currency": "USD",
            "pages": self.pages,
            "sha256": digest,
        }


def decode_base64(text: str) -> bytes:
    """Strict base64 (standard alphabet, padding required); raises ValueError when it is not."""
    try:
        return base64.b64decode(text.strip(), validate=True)
    except (binascii.Error, ValueError):
        raise ValueError("not valid base64") from None
