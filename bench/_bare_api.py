"""The API benchmark's floor: a bare starlette handler for ``POST /v1/runs`` that parses the JSON body and
makes one ``EVALSHA`` on the same Redis (one ``SET`` of the body), then answers 202, on uvicorn with
uvloop and httptools, like ``hookbridge api``. ``python -m bench._bare_api PORT`` with ``BARE_REDIS_URL``.
"""

from __future__ import annotations

import json
import os
import sys
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import redis.asyncio as aioredis
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

SCRIPT = "redis.call('SET', KEYS[1], ARGV[1]) return 1"


@asynccontextmanager
async def lifespan(app: Starlette) -> AsyncIterator[dict[str, object]]:
    client = aioredis.Redis.from_url(os.environ["BARE_REDIS_URL"])
    yield {"script": client.register_script(SCRIPT)}
    await client.aclose()


async def create(request: Request) -> JSONResponse:
    body = await request.json()
    run_id = f"run_{uuid.uuid4().hex}"
    await request.state.script(keys=[f"bare:{run_id}"], args=[json.dumps(body)])
    return JSONResponse({"id": run_id, "status": "queued"}, status_code=202)


app = Starlette(routes=[Route("/v1/runs", create, methods=["POST"])], lifespan=lifespan)

if __name__ == "__main__":
    uvicorn.run(
        app,
        host="127.0.0.1",
        port=int(sys.argv[1]),
        loop="uvloop",
        http="httptools",
        log_config=None,
        access_log=False,
    )
