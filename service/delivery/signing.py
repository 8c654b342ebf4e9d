"""Standard Webhooks signatures (https://www.standardwebhooks.com/): ``v1,<base64 HMAC-SHA256>`` of
``"{id}.{timestamp}.{body}"``, keyed by the base64 part of a ``whsec_`` secret."""

from __future__ import annotations

import base64
import hashlib
import hmac
import os

SECRET_PREFIX = "whsec_"


def new_secret() -> str:
    return SECRET_PREFIX + base64.b64encode(os.urandom(24)).decode()


def _key(secret: str) -> bytes:
    return base64.b64decode(secret.removeprefix(SECRET_PREFIX))


def sign(secret: str, msg_id: str, timestamp: int, body: bytes) -> str:
    to_sign = f"{msg_id}.{timestamp}.".encode() + body
    digest = hmac.new(_key(secret), to_sign, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode()


def signature_header(secrets: list[str], msg_id: str, timestamp: int, body: bytes) -> str:
    """One ``v1,`` entry per secret, separated by spaces (several during a rotation)."""
    return " ".join(sign(secret, msg_id, timestamp, body) for secret in secrets)


def headers(secrets: list[str], msg_id: str, timestamp: int, body: bytes, user_agent: str) -> dict[str, str]:
    return {
        "webhook-id": msg_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": signature_header(secrets, msg_id, timestamp, body),
        "content-type": "application/json",
        "user-agent": user_agent,
    }
