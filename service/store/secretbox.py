"""Subscription secrets at rest: AES-GCM under keys held outside Redis (``SECRET_KEYS``).

A stored ``secrets`` field is either the plain JSON list of ``[secret, expires_ms]`` (no keys set, or
written before they were) or ``enc:v1:<key id>:<base64 nonce + ciphertext>``. The subscription id is the
associated data, so a sealed value copied onto another subscription does not open. The first key seals;
every key listed opens, so a key is rotated by listing a new one first, re-sealing (``hookbridge
reseal-secrets``, or any write of the subscription), then dropping the old one.
"""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Sequence
from typing import Any

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

SEALED = "enc:v1:"


class SecretUnavailable(Exception):
    """A sealed secret cannot be opened with the keys configured (its key was removed, or it was
    tampered with). The message names the key id, never a key."""


class SecretBox:
    def __init__(self, keys: Sequence[tuple[str, bytes]]) -> None:
        self._keys = {key_id: AESGCM(key) for key_id, key in keys}
        self._primary = keys[0][0] if keys else None

    def seal(self, sub_id: str, secrets: list[list[Any]]) -> str:
        plain = json.dumps(secrets, separators=(",", ":"))
        if self._primary is None:
            return plain
        nonce = os.urandom(12)
        sealed = self._keys[self._primary].encrypt(nonce, plain.encode(), sub_id.encode())
        return f"{SEALED}{self._primary}:{base64.b64encode(nonce + sealed).decode()}"

    def open(self, sub_id: str, stored: str) -> list[list[Any]]:
        if not stored.startswith(SEALED):
            return list(json.loads(stored or "[]"))
        key_id, _, payload = stored[len(SEALED) :].partition(":")
        aead = self._keys.get(key_id)
        if aead is None:
            raise SecretUnavailable(f"sealed with key {key_id!r}, which SECRET_KEYS does not list")
        try:
            raw = base64.b64decode(payload)
            plain = aead.decrypt(raw[:12], raw[12:], sub_id.encode())
        except (InvalidTag, ValueError):
            raise SecretUnavailable(f"sealed with key {key_id!r} but does not open with it") from None
        return list(json.loads(plain))

    def current(self, stored: str) -> bool:
        """True when ``stored`` is sealed with the primary key (or no key is set and it is plain)."""
        if self._primary is None:
            return not stored.startswith(SEALED)
        return stored.startswith(f"{SEALED}{self._primary}:")
