"""The console's page over plain HTTP (no browser): what it serves, with which headers, and what it
never does (innerHTML with data, a route in the OpenAPI document)."""

from __future__ import annotations

import re
from pathlib import Path

from service.console import FILES
from tests.conftest import Stack

STATIC = Path(__file__).resolve().parents[2] / "service" / "console" / "static"


async def test_the_page_and_its_files_carry_a_strict_policy(stack: Stack) -> None:
    for name in ["", *FILES]:
        response = await stack.api.get(f"/console/{name}")
        assert response.status_code == 200, name
        csp = response.headers["content-security-policy"]
        assert "script-src 'self'" in csp and "default-src 'none'" in csp and "frame-ancestors 'none'" in csp
        assert "unsafe-inline" not in csp and "unsafe-eval" not in csp
        assert response.headers["x-frame-options"] == "DENY"
        assert response.headers["x-content-type-options"] == "nosniff"
    page = (await stack.api.get("/console/")).text
    assert "<script" in page and not re.search(r"<script(?![^>]*\bsrc=)[^>]*>", page), "inline script"
    assert " style=" not in page and "http://" not in page and "https://" not in page  # nothing external


async def test_anything_else_under_console_is_a_problem(stack: Stack) -> None:
    for path in ("/console/nope.js", "/console/..%2fapp.py", "/console/static"):
        response = await stack.api.get(path)
        assert response.status_code == 404, path
        assert response.headers["content-type"] == "application/problem+json"
    redirect = await stack.api.get("/console")
    assert redirect.status_code == 308 and redirect.headers["location"] == "/console/"
    # The sign-in form posts nowhere useful: a key sent without the script is refused, never echoed.
    posted = await stack.api.post("/console/", data={"key": "alice-key"})
    assert posted.status_code == 405 and "alice-key" not in posted.text


async def test_the_console_is_not_in_the_api_document(stack: Stack) -> None:
    paths = (await stack.api.get("/openapi.json")).json()["paths"]
    assert not [p for p in paths if p.startswith("/console")]


def test_scripts_never_parse_data_as_html() -> None:
    """Tenant data reaches the page only as text nodes and attributes (dom.js's h()); no module may use
    the HTML parsers, eval, or inline handlers."""
    banned = re.compile(r"innerHTML|outerHTML|insertAdjacentHTML|document\.write|\beval\(|new Function")
    for path in STATIC.glob("*.js"):
        assert not banned.search(path.read_text()), path.name
    assert not re.search(r"\son\w+=", (STATIC / "index.html").read_text())
    assert sorted(p.name for p in STATIC.iterdir()) == sorted(FILES)
