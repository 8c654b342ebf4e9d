"""What every handler needs, built once in the app's lifespan and handed to requests as its state."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from starlette.requests import Request

from service.api.auth import KeyRing
from service.api.models import Models
from service.delivery.urlsafety import Policy
from service.settings import Settings
from service.store import Store


@dataclass
class Context:
    settings: Settings
    store: Store
    keys: KeyRing
    url_policy: Policy
    models: Models
    openapi: bytes  # the document, encoded once
    log: Any

    @staticmethod
    def of(request: Request) -> Context:
        ctx: Context = request.state.ctx
        return ctx

    @staticmethod
    def authenticated(request: Request) -> tuple[Context, str]:
        """The context and the calling client (401 without a valid key)."""
        ctx: Context = request.state.ctx
        return ctx, ctx.keys.authenticate(request)
