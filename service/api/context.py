"""What every handler needs, built once in the app's lifespan and kept on ``app.state``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from starlette.requests import Request

from service.api.auth import KeyRing
from service.delivery.urlsafety import Policy
from service.settings import Settings
from service.store import Store
from service.store.feed import Feed


@dataclass
class Context:
    settings: Settings
    store: Store
    keys: KeyRing
    url_policy: Policy
    log: Any
    feed: Feed | None = None  # the event feed (GET /v1/events, the SSE streams)

    @staticmethod
    def of(request: Request) -> Context:
        ctx: Context = request.app.state.ctx
        return ctx
