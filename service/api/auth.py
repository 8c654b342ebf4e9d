"""API keys: ``Authorization: Bearer <secret>``, each key belonging to one client.

Keys are held as SHA-256 digests (a key may be configured as ``sha256:<hex>``) and every configured
digest is compared in constant time, so neither the comparison nor the lookup leaks a key by timing.
"""

from __future__ import annotations

import hashlib
import hmac

from starlette.requests import Request

from service.api.problems import Unauthorized


class KeyRing:
    def __init__(self, pairs: tuple[tuple[str, str], ...]) -> None:
        self._digests: list[tuple[bytes, str]] = []
        for client, secret in pairs:
            if secret.startswith("sha256:"):
                digest = bytes.fromhex(secret.removeprefix("sha256:"))
            else:
                digest = hashlib.sha256(secret.encode()).digest()
            self._digests.append((digest, client))

    def client_for(self, token: str) -> str | None:
        presented = hashlib.sha256(token.encode()).digest()
        found = None
        for digest, client in self._digests:
            if hmac.compare_digest(digest, presented):
                found = client
        return found

    def authenticate(self, request: Request) -> str:
        header = request.headers.get("authorization", "")
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise Unauthorized("Send an API key as 'Authorization: Bearer <key>'.")
        client = self.client_for(token.strip())
        if client is None:
            raise Unauthorized("The API key is not valid.")
        return client
