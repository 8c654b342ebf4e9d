"""Google's OAuth 2.0 token endpoint, simulated (``POST /token``), and the bearer check of the simulated
Document AI.

Contract §10: "an OAuth token endpoint that accepts Google's own audience (Google's clients also sign
their own JWTs, which the simulated Document AI accepts)".

- Keys. A service-account key is trusted when the simulator holds its public half: the key file named by
  ``HOOKBRIDGE_SIM_GOOGLE_SA_KEY_FILE`` (the demo writes a throwaway one), or one made by
  ``POST /_sim/google/service-account``, which answers a complete service-account JSON whose
  ``token_uri`` is this simulator's ``/token``. JWTs name their key by ``kid`` (google-auth sets it to
  the key file's ``private_key_id``).
- ``POST /token`` takes the JWT-bearer grant (RFC 7523; form fields ``grant_type`` =
  ``urn:ietf:params:oauth:grant-type:jwt-bearer`` and ``assertion``), as google-auth's
  ``service_account.Credentials`` sends it to the key file's ``token_uri``. The assertion must be RS256,
  signed by a trusted key, ``iss`` its ``client_email``, ``aud`` this endpoint or Google's own
  (``https://oauth2.googleapis.com/token``), ``iat`` not in the future, ``exp`` after now and at most an
  hour after ``iat``, and ``scope`` must be present. The answer is Google's: ``{access_token,
  expires_in, token_type: "Bearer"}``; a refusal is ``400 {error: "invalid_grant", error_description}``.
- Document AI accepts an access token issued here (before it expires, carrying the ``cloud-platform``
  scope), or a self-signed JWT from a trusted key (``iss`` = ``sub`` = its ``client_email``; ``aud``
  ``https://documentai.googleapis.com/`` or a ``scope`` claim with ``cloud-platform``), which is what
  Google's generated clients send for service-account keys (``with_always_use_jwt_access``).
"""

from __future__ import annotations

import base64
import binascii
import json
import secrets
import urllib.parse
from dataclasses import dataclass, field
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from ._state import bounded_body, sim_state

JWT_BEARER = "urn:ietf:params:oauth:grant-type:jwt-bearer"
GOOGLE_TOKEN_AUDIENCE = "https://oauth2.googleapis.com/token"
DOCAI_AUDIENCE = "https://documentai.googleapis.com/"
CLOUD_PLATFORM = "https://www.googleapis.com/auth/cloud-platform"
TOKEN_LIFETIME_S = 3600
_MAX_JWT_LIFETIME_S = 3600
_CLOCK_SKEW_S = 300
_MAX_ASSERTION = 16_384


class AuthError(Exception):
    """Why a token or assertion is refused (the message is safe to return: it names no secret)."""


@dataclass(frozen=True)
class TrustedKey:
    client_email: str
    public_key: rsa.RSAPublicKey


@dataclass
class Issued:
    expires_at: float
    scopes: frozenset[str]


@dataclass
class OAuthStore:
    keys: dict[str, TrustedKey] = field(default_factory=dict)
    tokens: dict[str, Issued] = field(default_factory=dict)

    def trust_key_file(self, path: str) -> None:
        with open(path, encoding="utf-8") as f:
            info = json.load(f)
        self.trust(info)

    def trust(self, info: dict[str, Any]) -> None:
        key = serialization.load_pem_private_key(info["private_key"].encode(), password=None)
        if not isinstance(key, rsa.RSAPrivateKey):
            raise ValueError("the service-account key is not an RSA key")
        self.keys[info["private_key_id"]] = TrustedKey(info["client_email"], key.public_key())

    def new_service_account(self, token_uri: str, project_id: str) -> dict[str, Any]:
        """A throwaway service-account key file, trusted from now on."""
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        pem = key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        ).decode()
        key_id = secrets.token_hex(20)
        email = f"sim-{key_id[:8]}@{project_id}.iam.gserviceaccount.com"
        info = {
            "type": "service_account",
            "project_id": project_id,
            "private_key_id": key_id,
            "private_key": pem,
            "client_email": email,
            "client_id": str(int(key_id[:15], 16)),
            "auth_uri": "https://accounts.google.com/o/oauth2/auth",
            "token_uri": token_uri,
        }
        self.keys[key_id] = TrustedKey(email, key.public_key())
        return info


def _b64(part: str) -> bytes:
    return base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))


def verify_jwt(store: OAuthStore, token: str, now: float) -> dict[str, Any]:
    """The claims of an RS256 JWT signed by a trusted key, with its times checked; AuthError otherwise."""
    parts = token.split(".")
    if len(parts) != 3 or len(token) > _MAX_ASSERTION:
        raise AuthError("not a JWT")
    try:
        header, claims = json.loads(_b64(parts[0])), json.loads(_b64(parts[1]))
        signature = _b64(parts[2])
    except (ValueError, binascii.Error):
        raise AuthError("malformed JWT") from None
    if not isinstance(header, dict) or not isinstance(claims, dict):
        raise AuthError("malformed JWT")
    if header.get("alg") != "RS256":
        raise AuthError("JWT must be signed with RS256")
    key = store.keys.get(str(header.get("kid")))
    if key is None:
        raise AuthError("JWT signed by an unknown key")
    try:
        key.public_key.verify(
            signature, f"{parts[0]}.{parts[1]}".encode(), padding.PKCS1v15(), hashes.SHA256()
        )
    except InvalidSignature:
        raise AuthError("invalid JWT signature") from None
    if claims.get("iss") != key.client_email:
        raise AuthError("iss is not the key's client_email")
    iat, exp = claims.get("iat"), claims.get("exp")
    if not isinstance(iat, int | float) or not isinstance(exp, int | float):
        raise AuthError("iat and exp are required")
    if iat > now + _CLOCK_SKEW_S:
        raise AuthError("JWT issued in the future")
    if exp <= now - _CLOCK_SKEW_S:
        raise AuthError("JWT expired")
    if exp - iat > _MAX_JWT_LIFETIME_S:
        raise AuthError("JWT lifetime over one hour")
    return claims


def _scopes(claims: dict[str, Any]) -> frozenset[str]:
    scope = claims.get("scope")
    return frozenset(scope.split()) if isinstance(scope, str) else frozenset()


def _grant_error(description: str) -> Response:
    return JSONResponse({"error": "invalid_grant", "error_description": description}, status_code=400)


async def token(request: Request) -> Response:
    state = sim_state(request)
    store: OAuthStore = request.app.state.oauth
    if request.headers.get("content-type", "").split(";")[0].strip() != "application/x-www-form-urlencoded":
        return JSONResponse(
            {"error": "invalid_request", "error_description": "form-encoded body required"}, status_code=400
        )
    body = await bounded_body(request, _MAX_ASSERTION)
    if body is None:
        return JSONResponse({"error": "invalid_request", "error_description": "body too large"}, 400)
    form = urllib.parse.parse_qs(body.decode("latin-1"))
    if form.get("grant_type") != [JWT_BEARER]:
        return JSONResponse({"error": "unsupported_grant_type", "error_description": "jwt-bearer only"}, 400)
    assertion = form.get("assertion", [""])
    if len(assertion) != 1 or not assertion[0]:
        return JSONResponse({"error": "invalid_request", "error_description": "assertion required"}, 400)
    now = state.clock.time()
    try:
        claims = verify_jwt(store, assertion[0], now)
    except AuthError as exc:
        return _grant_error(str(exc))
    own = str(request.url.replace(query=""))
    if claims.get("aud") not in (own, GOOGLE_TOKEN_AUDIENCE):
        return _grant_error("aud must be the token endpoint")
    scopes = _scopes(claims)
    if not scopes:
        return JSONResponse({"error": "invalid_scope", "error_description": "scope required"}, 400)
    access = "ya29.sim-" + secrets.token_urlsafe(32)
    store.tokens[access] = Issued(expires_at=now + TOKEN_LIFETIME_S, scopes=scopes)
    # Bounded: expired tokens go when new ones are issued.
    for stale in [t for t, issued in store.tokens.items() if issued.expires_at <= now]:
        del store.tokens[stale]
    return JSONResponse({"access_token": access, "expires_in": TOKEN_LIFETIME_S, "token_type": "Bearer"})


def check_bearer(store: OAuthStore, authorization: str | None, now: float) -> None:
    """Passes for a bearer token that may call Document AI; AuthError (401) or PermissionError (403)."""
    if not authorization or not authorization.startswith("Bearer "):
        raise AuthError("Request is missing required authentication credential.")
    value = authorization[len("Bearer ") :].strip()
    issued = store.tokens.get(value)
    if issued is not None:
        if issued.expires_at <= now:
            raise AuthError("Request had invalid authentication credentials: the token expired.")
        if CLOUD_PLATFORM not in issued.scopes:
            raise PermissionError("Request had insufficient authentication scopes.")
        return
    if value.count(".") != 2:
        raise AuthError("Request had invalid authentication credentials.")
    claims = verify_jwt(store, value, now)
    if claims.get("sub") != claims.get("iss"):
        raise AuthError("a self-signed JWT needs sub equal to iss")
    if claims.get("aud") != DOCAI_AUDIENCE and CLOUD_PLATFORM not in _scopes(claims):
        raise PermissionError("Request had insufficient authentication scopes.")


async def new_service_account(request: Request) -> Response:
    """``POST /_sim/google/service-account``: a throwaway key file trusted by this simulator."""
    store: OAuthStore = request.app.state.oauth
    config = sim_state(request).config
    token_uri = str(request.base_url).rstrip("/") + "/token"
    return JSONResponse(store.new_service_account(token_uri, config.google_docai_project_id))
