"""The console at ``/console/``: one static page and a few JavaScript modules of our own, over the public
``/v1`` API.

The page holds no data and no key: the browser signs in with the client's API key (kept in
sessionStorage) and every call it makes goes through the same API, with the same checks, as a curl would.
What the server adds is a strict Content-Security-Policy (only our own scripts, no inline script or
style, no frames), so that tenant data the page shows can never run as code. The routes are left out of
the OpenAPI document (``include_in_schema=False``): they are not part of the API.
"""

from __future__ import annotations

from importlib import resources

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

# Every file the console serves, by name: nothing else under static/ is reachable, whatever the path.
FILES = {
    "index.html": "text/html; charset=utf-8",
    "console.css": "text/css; charset=utf-8",
    "api.js": "text/javascript; charset=utf-8",
    "sse.js": "text/javascript; charset=utf-8",
    "dom.js": "text/javascript; charset=utf-8",
    "runs.js": "text/javascript; charset=utf-8",
    "subscriptions.js": "text/javascript; charset=utf-8",
    "charts.js": "text/javascript; charset=utf-8",
    "main.js": "text/javascript; charset=utf-8",
}

CSP = "; ".join(
    (
        "default-src 'none'",
        "script-src 'self'",
        "style-src 'self'",
        "img-src 'self'",
        "connect-src 'self'",
        "form-action 'self'",
        "base-uri 'none'",
        "frame-ancestors 'none'",
    )
)
HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    # Small files that change with each release: revalidate rather than serve a stale mix of modules.
    "Cache-Control": "no-cache",
}


def _read(name: str) -> bytes:
    return resources.files(__package__).joinpath("static", name).read_bytes()


async def index(request: Request) -> Response:
    return Response(_read("index.html"), media_type=FILES["index.html"], headers=HEADERS)


async def asset(request: Request) -> Response:
    name = request.path_params["name"]
    if name not in FILES:
        raise HTTPException(404, f"No console file {name[:40]}.")
    return Response(_read(name), media_type=FILES[name], headers=HEADERS)


async def to_index(request: Request) -> Response:
    return RedirectResponse("/console/", status_code=308)


routes = [
    Route("/console", to_index, include_in_schema=False),
    Route("/console/", index, include_in_schema=False),
    Route("/console/{name}", asset, include_in_schema=False),
]
