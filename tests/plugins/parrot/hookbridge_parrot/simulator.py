"""Parrot's own simulator: a job ends ``done`` (its result echoes the document) about 0.2 s after it is
submitted, ``failed`` if the filename says "fail", and never if it says "stuck"."""

from __future__ import annotations

import base64
import hashlib
import itertools
import time
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

KEY = "parrot-key"


def create_app(*, key: str = KEY, region: str = "eu", duration_s: float = 0.2) -> Starlette:
    jobs: dict[str, dict[str, Any]] = {}
    by_key: dict[str, str] = {}
    ids = itertools.count(1)

    def refused(request: Request) -> Response | None:
        if request.headers.get("x-parrot-key") != key:
            return JSONResponse({"error": "bad key"}, 401)
        return None

    def view(job: dict[str, Any]) -> dict[str, Any]:
        state = job["state"]
        if state == "waiting" and time.monotonic() >= job["working_at"]:
            state = "working"
        if state in ("waiting", "working") and time.monotonic() >= job["ends"]:
            state = job["ending"]
        job["state"] = state
        out = {"id": job["id"], "state": state}
        if state == "done":
            out["result"] = job["result"]
        if state == "failed":
            out["error"] = "the parrot could not read the document"
        return out

    async def submit(request: Request) -> Response:
        if (bad := refused(request)) is not None:
            return bad
        if request.headers.get("x-region") != region:
            return JSONResponse({"error": f"this endpoint serves region {region}"}, 400)
        body = await request.json()
        if body.get("operation") not in ("extract", "echo"):
            return JSONResponse({"error": "unknown operation"}, 400)
        idem = request.headers.get("idempotency-key", "")
        if idem and idem in by_key:
            return JSONResponse(view(jobs[by_key[idem]]), 202)
        filename = str(body.get("filename", ""))
        content = base64.b64decode(body.get("content", "")) if "content" in body else body["url"].encode()
        job_id = f"job-{next(ids)}"
        ending = "failed" if "fail" in filename else "stuck" if "stuck" in filename else "done"
        jobs[job_id] = {
            "id": job_id,
            "state": "waiting",
            "ending": ending,
            "working_at": time.monotonic() + duration_s / 2,
            "ends": time.monotonic() + (duration_s if ending != "stuck" else float("inf")),
            "result": {"echo": filename, "sha256": hashlib.sha256(content).hexdigest()},
        }
        if idem:
            by_key[idem] = job_id
        return JSONResponse(view(jobs[job_id]), 202)

    async def poll(request: Request) -> Response:
        if (bad := refused(request)) is not None:
            return bad
        job = jobs.get(request.path_params["job_id"])
        return JSONResponse(view(job), 200) if job else JSONResponse({"error": "no such job"}, 404)

    async def cancel(request: Request) -> Response:
        if (bad := refused(request)) is not None:
            return bad
        job = jobs.get(request.path_params["job_id"])
        if job is None:
            return JSONResponse({"error": "no such job"}, 404)
        if view(job)["state"] in ("done", "failed"):
            return JSONResponse({"error": "already ended"}, 409)
        job["state"] = "canceled"
        return JSONResponse(view(job), 200)

    return Starlette(
        routes=[
            Route("/jobs", submit, methods=["POST"]),
            Route("/jobs/{job_id}", poll, methods=["GET"]),
            Route("/jobs/{job_id}/cancel", cancel, methods=["POST"]),
        ]
    )
