"""Every example in the README and docs/ runs, as written, against a real stack.

The fenced blocks are read from the Markdown files themselves. Shell blocks run in bash (``set -eu``), one
after another per document, with each block's exported variables carried to the next, as one reader's
shell would; a Python block that names its file on its first line (``# receiver.py: ...``) is saved under
that name, as the text tells the reader to. The stack is the one from tests/conftest.py: the API on
uvicorn, a worker, the vendor simulator and a redis-server, all real. What differs between a reader's
machine and the test (the API's address and key, the receiver's port) is substituted in one place,
:data:`SUBSTITUTIONS`; blocks that cannot run here are listed, with the reason, in :data:`NOT_RUN`, and a
test checks that both tables stay true to the documents.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import socket
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from standardwebhooks import Webhook
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from service.dev.embedded_redis import free_port
from tests.conftest import ALICE, Stack, StackFactory, eventually

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

# What a reader's machine has and the test's does not: `make dev`'s fixed ports and key. Applied to every
# shell block before it runs, in this order.
SUBSTITUTIONS: tuple[tuple[str, str], ...] = (
    ("http://localhost:8080", "{api_url}"),  # `make dev`'s API: the test stack's, on a free port
    ("KEY=dev-key", "KEY={api_key}"),  # `make dev`'s key: one of the test stack's keys
    ("127.0.0.1:9000", "127.0.0.1:{receiver_port}"),  # the reader's receiver: on a free port
    ("--port 9000", "--port {receiver_port}"),
)

# Blocks that do not run here, by file and the start of their first line, with why. Every other `sh` or
# `python` block runs.
NOT_RUN: dict[tuple[str, str], str] = {
    ("README.md", "make demo "): "`make test` is this suite; test_demo_as_the_readme_shows runs the demo",
    ("README.md", "registered receiver http://"): "the demo's output: test_demo_as_the_readme_shows",
    ("README.md", "app ──POST /v1/runs──▶"): "a diagram",
    (
        "README.md",
        "pip install .",
    ): "production processes: tests/chart/test_pods_start.py starts them so",
    ("README.md", "# values.yaml"): "Helm values: tests/chart/ renders the chart with values like these",
    ("README.md", "helm install hookbridge helm/hookbridge"): "needs a cluster",
    ("README.md", "service/"): "the source tree",
    ("README.md", '[project.entry-points."hookbridge.vendors"]'): "pyproject: tests/plugins/ installs one",
    (
        "docs/receiving-callbacks.md",
        "make dev ",
    ): "the test's stack (API, worker, simulator, Redis) stands in",
    ("docs/receiving-callbacks.md", "POST /hooks/extraction HTTP/1.1"): "a sample request",
    ("docs/receiving-callbacks.md", 'import express from "express";'): "Node: no toolchain in the test",
    ("docs/receiving-callbacks.md", 'import standardwebhooks "github.com/'): "Go: no toolchain in the test",
    ("docs/reliability.md", "python -m bench.hostile"): "benchmarks (minutes); test_bench_smoke.py",
    (
        "docs/reliability.md",
        "make venv && .venv/bin/python -m bench.chaos",
    ): "minutes; test_chaos.py runs one",
    ("docs/deploy.md", "docker build "): "needs docker; tests/chart/test_dockerfile.py checks the Dockerfile",
    ("docs/deploy.md", "redis:"): "Helm values: tests/chart/ renders the chart with values like these",
    ("docs/deploy.md", "# values-production.yaml"): "Helm values: tests/chart/",
    ("docs/deploy.md", "kubectl "): "needs a cluster",
    ("docs/deploy.md", "helm install "): "needs a cluster",
    (
        "docs/operations.md",
        "api:",
    ): "Helm values: tests/chart/test_tracing_env.py renders this very block",
    ("docs/deploy.md", "make schema "): "writes the chart's schema; tests/chart/ checks it is current",
    ("docs/deploy.md", "vendors:"): "Helm values: tests/chart/values/existing-secret.yaml renders these",
    ("docs/deploy.md", "# The Bitnami redis-cluster chart"): "Helm values: tests/chart/values/cluster.yaml",
    (
        "docs/deploy.md",
        "# A managed endpoint: ElastiCache",
    ): "Helm values: tests/chart/values/cluster-tls.yaml",
    ("docs/vendors.md", '{"Version": "2012-10-17"'): "an IAM policy: needs AWS",
    ("docs/architecture.md", "cli ─────"): "a diagram",
    (
        "README.md",
        "from hookbridge.testing import VendorConformance",
    ): "a plugin's test: plugins/hookbridge-llamaparse/tests/ subclass the kit so",
}


def not_run(block: Block) -> str | None:
    for (doc, start), reason in NOT_RUN.items():
        if block.doc == doc and block.first.startswith(start):
            return reason
    return None


RUNNABLE = {"sh", "bash", "python"}
# Documents whose runnable blocks this file runs (each one's test below).
RUN_HERE = {"README.md", "docs/receiving-callbacks.md"}

_FENCE = re.compile(r"^(?P<indent>[ \t]*)```(?P<lang>[\w-]*)[ \t]*$")


@dataclass
class Block:
    doc: str
    lang: str
    text: str

    @property
    def first(self) -> str:
        return next(line for line in self.text.splitlines() if line.strip()).strip()


def blocks(path: Path) -> list[Block]:
    """The fenced blocks of a Markdown file, de-indented (a block may sit in a list item)."""
    found: list[Block] = []
    lines = path.read_text().splitlines()
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, body = m["indent"], []
        i += 1
        while lines[i].strip() != "```":
            body.append(lines[i].removeprefix(indent))
            i += 1
        found.append(Block(str(path.relative_to(ROOT)), m["lang"], "\n".join(body) + "\n"))
        i += 1
    return found


def runnable(doc: str) -> list[Block]:
    return [b for b in blocks(ROOT / doc) if b.lang in RUNNABLE and not_run(b) is None]


def answers(stdout: str) -> list[Any]:
    """The JSON values curl printed, in order (curl -s prints bodies back to back, without newlines)."""
    decoder, out, i = json.JSONDecoder(), [], 0
    while i < len(stdout):
        if stdout[i] in "{[":
            value, i = decoder.raw_decode(stdout, i)
            out.append(value)
        else:
            i += 1
    return out


def problems(values: list[Any]) -> list[Any]:
    """RFC 9457 answers among them: what a broken example gets (e.g. 415 without a content type)."""
    return [v for v in values if isinstance(v, dict) and isinstance(v.get("status"), int)]


class Reader:
    """One reader's shell: a working directory, exported variables carried from block to block."""

    def __init__(self, workdir: Path, values: dict[str, str]) -> None:
        self.workdir = workdir
        self.values = values
        self.env_file = workdir / ".exported"
        self.env_file.write_text("")
        self.sessions: list[int] = []

    def substitute(self, text: str) -> str:
        for old, new in SUBSTITUTIONS:
            text = text.replace(old, new.format(**self.values))
        return text

    async def run(self, block: Block) -> str:
        if block.lang == "python":
            name = re.match(r"#\s*([\w.]+\.py):", block.first)
            assert name, f"{block.doc}: a Python block names its file on its first line ({block.first!r})"
            (self.workdir / name[1]).write_text(block.text)
            return ""
        script = (
            f"set -eu\nsource {self.env_file}\n{self.substitute(block.text)}\nexport -p > {self.env_file}\n"
        )
        env = {
            "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
            "HOME": str(self.workdir),
            "LANG": "C.UTF-8",
        }
        proc = await asyncio.create_subprocess_exec(
            "bash",
            "-c",
            script,
            cwd=self.workdir,
            env=env,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,  # what it leaves running in the background is stopped with its group
        )
        self.sessions.append(proc.pid)
        out, err = await asyncio.wait_for(proc.communicate(), timeout=60)
        assert proc.returncode == 0, f"{block.doc}: `{block.first}` exited {proc.returncode}: {err.decode()}"
        stdout = out.decode()
        assert not problems(answers(stdout)), f"{block.doc}: `{block.first}` answered {stdout}"
        return stdout

    def stop(self) -> None:
        for pgid in self.sessions:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pgid, signal.SIGTERM)


@pytest.fixture
def reader(tmp_path: Path) -> Any:
    made: list[Reader] = []

    def make(values: dict[str, str]) -> Reader:
        made.append(Reader(tmp_path, values))
        return made[-1]

    yield make
    for r in made:
        r.stop()


def test_every_fenced_block_is_run_or_listed_with_a_reason() -> None:
    every = [b for path in DOCS for b in blocks(path)]
    stale = [key for key in NOT_RUN if not any(b.doc == key[0] and b.first.startswith(key[1]) for b in every)]
    assert stale == [], "NOT_RUN lists blocks the docs no longer have"
    unaccounted = [
        (b.doc, b.first)
        for b in every
        if not_run(b) is None and (b.lang not in RUNNABLE or b.doc not in RUN_HERE)
    ]
    assert unaccounted == [], "a block that neither runs here nor says why it cannot"
    assert len(runnable("README.md")) == 3 and len(runnable("docs/receiving-callbacks.md")) == 8


async def _accepts(port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.2):
        return True
    return False


async def test_readme_examples(make_stack: StackFactory, servers: Any, reader: Any) -> None:
    """The README's "Using it": register a receiver, submit a multipart run; the run calls back, signed."""
    stack: Stack = await make_stack()
    received: list[tuple[dict[str, str], bytes]] = []

    async def hook(request: Request) -> Response:
        received.append((dict(request.headers), await request.body()))
        return Response(status_code=204)

    port = free_port()
    await servers.start(Starlette(routes=[Route("/hooks/extraction", hook, methods=["POST"])]), port)
    shell: Reader = reader({"api_url": stack.api_url, "api_key": ALICE, "receiver_port": str(port)})
    (shell.workdir / "examples").symlink_to(ROOT / "examples")  # the reader is at the top of the checkout

    block, features_block, feed_block = runnable("README.md")
    subscription, run = answers(await shell.run(block))
    assert subscription["secret"].startswith("whsec_")
    assert subscription["url"] == f"http://127.0.0.1:{port}/hooks/extraction"
    assert run["status"] == "queued" and run["metadata"] == {"order_id": "A-1001"}

    await stack.wait_status(run["id"], "succeeded")

    def ended() -> list[dict[str, Any]]:
        bodies = [json.loads(body) for _, body in received]
        return [e for e in bodies if e["type"] == "run.succeeded" and e["data"]["run"]["id"] == run["id"]]

    async def check() -> list[dict[str, Any]]:
        return ended()

    await eventually(check, what="the run's run.succeeded callback")
    for headers, body in received:
        Webhook(subscription["secret"]).verify(body, headers)  # raises if not signed with that secret

    # "Resend, example events, filters, request ids": an example run.failed reaches the receiver, the
    # run is found by its metadata, and the request id is echoed.
    out = await shell.run(features_block)
    example, runs, _log = answers(out)
    assert runs["data"][0]["id"] == run["id"]
    assert "x-request-id: order-a-1001.try-1" in out.lower()

    async def example_arrived() -> bool:
        return any(json.loads(body)["type"] == "run.failed" for _, body in received)

    await eventually(example_arrived, what="the example run.failed")
    [failed] = [json.loads(body) for h, body in received if h["webhook-id"] == example["event_id"]]
    assert failed["data"]["example"] is True
    received[:] = [(h, body) for h, body in received if h["webhook-id"] != example["event_id"]]

    # "No endpoint? Read the feed": the page, the long-poll, the stream, all with the run's events.
    page, polled, *streamed = answers(await shell.run(feed_block))
    assert page["data"][0]["type"] == "run.submitted"
    assert {e["event_id"] for e in streamed} >= {h["webhook-id"] for h, _ in received}
    assert [e["type"] for e in polled["data"]] == ["run.succeeded"]
    assert [e["id"] for e in streamed][: len(page["data"])] == [e["id"] for e in page["data"]]


def test_the_sample_invoice_is_a_real_pdf() -> None:
    """The README's multipart example sends examples/invoice.pdf: a file that exists, parses as a PDF
    (header, cross-reference table, trailer) and stays small."""
    data = (ROOT / "examples" / "invoice.pdf").read_bytes()
    assert data.startswith(b"%PDF-1.") and data.rstrip().endswith(b"%%EOF") and len(data) < 4096
    startxref = int(data.rsplit(b"startxref", 1)[1].split()[0])
    assert data[startxref:].startswith(b"xref")
    offsets = [int(line.split()[0]) for line in data[startxref:].split(b"\n")[3:] if line.endswith(b" n ")]
    assert offsets and all(re.match(rb"\d+ 0 obj", data[o:]) for o in offsets)
    assert b"@examples/invoice.pdf" in (ROOT / "README.md").read_bytes()


async def test_readme_then_quickstart_register_one_subscription(
    make_stack: StackFactory, reader: Any
) -> None:
    """The README's example, then the quickstart's first block in the same shell: one subscription for
    the URL (sub.json is reused), so no second one is left failing verification (401) forever."""
    stack: Stack = await make_stack()
    port = free_port()
    shell: Reader = reader({"api_url": stack.api_url, "api_key": ALICE, "receiver_port": str(port)})
    (shell.workdir / "examples").symlink_to(ROOT / "examples")
    await shell.run(runnable("README.md")[0])
    await shell.run(runnable("docs/receiving-callbacks.md")[0])
    url = f"http://127.0.0.1:{port}/hooks/extraction"
    subs = [s for s in (await stack.api.get("/v1/subscriptions")).json()["data"] if s["url"] == url]
    assert len(subs) == 1
    exported = (shell.workdir / ".exported").read_text()
    assert f'SUB_ID="{subs[0]["id"]}"' in exported


async def test_callbacks_quickstart(make_stack: StackFactory, reader: Any) -> None:
    """docs/receiving-callbacks.md from top to bottom: register, run the receiver, a test event, a run, the
    receiver's log; then recover."""
    stack: Stack = await make_stack()
    port = free_port()
    shell: Reader = reader({"api_url": stack.api_url, "api_key": ALICE, "receiver_port": str(port)})
    log = shell.workdir / "receiver.log"
    outputs: list[str] = []
    for block in runnable("docs/receiving-callbacks.md"):
        if "grep verified receiver.log" in block.text:  # the reader waits "a few seconds"; we poll

            async def succeeded() -> bool:
                return log.exists() and "verified run.succeeded" in log.read_text()

            await eventually(succeeded, what="run.succeeded in receiver.log")
        outputs.append(await shell.run(block))
        if "uvicorn receiver:app" in block.text:  # started in the background: wait until it listens

            async def listening() -> bool:
                return await _accepts(port)

            await eventually(listening, what="the receiver listening")

    events = [line.split()[1] for line in log.read_text().splitlines() if line.startswith("verified ")]
    assert events[0] == "subscription.test"
    assert events[1] == "run.submitted" and events[-1] == "run.succeeded"
    assert set(events[2:-1]) <= {"run.progress"}
    grep = next(out for out in outputs if out.startswith("verified "))
    assert "verified run.succeeded" in grep
    assert {"retried": 0, "next_cursor": None} in [
        v for out in outputs for v in answers(out)
    ]  # the recover example
    # "No endpoint? Read the feed": the reader prints the events the receiver verified, the same ids.
    fed = [line.split() for out in outputs for line in out.splitlines() if line.startswith(("run.", "sub"))]
    verified = [line.split()[1:] for line in log.read_text().splitlines() if line.startswith("verified ")]
    assert fed and {tuple(f) for f in fed} == {tuple(v) for v in verified}
    test = "subscription.test"  # a chain of its own: its callback may overtake or trail the run's
    assert [f for f in fed if f[0] != test] == [v for v in verified if v[0] != test]
    exported = (shell.workdir / ".exported").read_text()
    assert "SUB_ID=" in exported and "HOOKBRIDGE_SECRET=" in exported


async def test_demo_as_the_readme_shows() -> None:
    """`make demo` (that is, `hookbridge demo`) on a machine with no Redis configured: it starts its own,
    and prints what the README shows."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HOOKBRIDGE_")}
    proc = await asyncio.create_subprocess_exec(
        str(Path(sys.executable).parent / "hookbridge"),
        "demo",
        "--timeout",
        "60",
        cwd=ROOT,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out = (await asyncio.wait_for(proc.communicate(), timeout=90))[0].decode()
    assert proc.returncode == 0, out
    sample = next(b for b in blocks(ROOT / "README.md") if b.first.startswith("registered receiver http://"))
    for line in sample.text.splitlines():
        # progress is reported when the vendor's poll happens to see it: "something like", says the README
        if line.strip() and line.strip() != "..." and "run.progress" not in line:
            # the sample's ids and ports are elided: compare up to the first elision
            prefix = re.split(r"\d{4,}|_01M8", line)[0].rstrip()
            assert any(got.startswith(prefix) for got in out.splitlines()), (prefix, out)
    assert "INVALID" not in out
    assert "werkzeug" not in out, out  # moto's request lines follow the log level (WARNING here)
