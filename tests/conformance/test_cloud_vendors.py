"""The conformance suite for Textract and Document AI, each against the built-in simulator and its storage.

The staging (S3, GCS) and the token endpoint are reached directly, not through the suite's fault proxy:
the proxy stands between the worker and the vendor's API only. Textract signs the request's Host, which
the proxy forwards: its simulator recomputes every signature (``textract_sigv4=verify``, the default).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from service.dev.embedded_redis import free_port
from service.dev.stack import Servers
from service.simulator import SimulatorConfig, cloud
from service.simulator import create_app as create_simulator
from service.testing.suite import Harness, VendorConformance
from service.vendors import aws, gcp
from service.vendors.google_docai import GoogleDocaiAdapter
from service.vendors.textract import TextractAdapter
from tests.conftest import eventually

SIM = {"duration_s": (0.1, 0.3), "seed": 7, "storage_buckets": cloud.BUCKET}


# The 429 test counts the vendor's requests during a one-second storm that starts before its five runs
# are submitted: their documents are put in the bucket beforehand, so that no staging (a few hundred
# milliseconds each on a loaded machine, in the simulator's own process) pushes them past it.
# So is the timeout test's (MAX_RUN_S 1 s), which must reach the vendor before the run is over.
PRESTAGED = ("conformance-429-", "conformance-stuck-timeout")


async def _storage_started(root: str) -> None:
    """The emulators start on first use (moto's import alone takes seconds): before the suite's clock;
    the 429 test's documents put in both buckets."""
    content = b"%PDF-1.4 conformance prestaged"
    async with httpx.AsyncClient(timeout=60) as client:
        (await client.get(f"{root}/_sim/storage")).raise_for_status()
        frozen = aws.Frozen(
            SimulatorConfig().textract_access_key_id, SimulatorConfig().textract_secret_access_key, None
        )
        for name in [*(f"conformance-429-{i}.pdf" for i in range(5)), "conformance-stuck-timeout.pdf"]:
            put = httpx.Request("PUT", f"{root}/s3/{cloud.BUCKET}/{name}", content=content)
            aws.sign(put, frozen, "s3", "us-east-1")
            (await client.send(put)).raise_for_status()
            (
                await client.post(
                    f"{root}/gcs/upload/storage/v1/b/{cloud.BUCKET}/o",
                    params={"uploadType": "media", "name": name},
                    content=content,
                    headers={"Content-Type": "application/pdf"},
                )
            ).raise_for_status()


class TestTextract(VendorConformance):
    vendor = "textract"
    base_path = "/textract"
    submit_idempotent = True
    status_path = ("JobStatus",)
    vendor_deletes = False  # Textract keeps its results 7 days and has no API to delete them (§2.5)

    async def test_an_unknown_status_is_running(self, harness: Any) -> None:
        pytest.skip(
            "the proxy rewrites the status of GET answers; Textract's Get* is a POST (§2.1): "
            "tests/unit/test_cloud_vendor_rules.py holds the rule as a table"
        )

    async def test_every_request_meets_the_proxy(self, harness: Any) -> None:
        """Every Textract request is ``POST /`` (the JSON 1.1 protocol, §2.1): the Start and each Get."""
        h: Harness = await harness()
        run = await h.submit("conformance-through.pdf")
        done = await h.stack.wait_status(run["id"], "succeeded", "failed", "canceled")
        assert done["status"] == "succeeded", done
        posts = [e for e in h.proxy.log if e.method == "POST" and e.path == "/textract/"]
        assert len(posts) == len(h.proxy.log) and len(posts) >= 1 + done["polls"], h.requests()

    @pytest.fixture
    async def vendor_root(self, servers: Servers, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
        aws.service_model("textract")  # botocore's model loaded once per process, before the clock starts
        config = SimulatorConfig(**SIM)
        root = await servers.start(create_simulator(config), free_port())
        await _storage_started(root)
        env = cloud.textract_settings(cloud.Reach(config, root, tmp_path))
        for name in cloud.PROCESS_VARIABLES:  # AWS's chain reads the process environment
            monkeypatch.setenv(name, env.pop(name))
        self._env = {
            k: v for k, v in env.items() if not k.startswith(("HOOKBRIDGE_SIM_", "HOOKBRIDGE_TEXTRACT_BASE"))
        }
        return root

    def env(self) -> dict[str, str]:
        return self._env

    def run_body(self, filename: str) -> dict[str, Any]:
        body = {**super().run_body(filename), **cloud.DEMO_RUNS["textract"]}
        if filename.startswith(PRESTAGED):  # already in the bucket: the run's first request is Textract's
            body["document"] = {"url": f"s3://{cloud.BUCKET}/{filename}"}
        return body


class TestGoogleDocai(VendorConformance):
    vendor = "google_docai"
    base_path = "/google_docai"
    cancel_marker = ":cancel"
    status_path = ("metadata", "state")

    async def test_an_unknown_status_is_running(self, harness: Any) -> None:
        pytest.skip(
            "an Operation ends by its `done` (§3.4), whatever its state says: an unknown state is running "
            "only while not done; tests/unit/test_cloud_vendor_rules.py holds the rule as a table"
        )

    async def test_zero_retention_deletes_the_vendors_copy(self, harness: Any) -> None:
        """Document AI's copy is the staged document and its output, in our bucket (contract §10): deleted
        through Cloud Storage, not the vendor's API (so not through the proxy); the run says so once
        every object is gone."""
        h: Harness = await harness()
        run = await h.submit("conformance-zero.pdf", zero_retention=True)
        done = await h.stack.wait_status(run["id"], "succeeded", "failed", "canceled")
        assert done["status"] == "succeeded", done
        root = h.proxy.target

        async def told() -> bool:
            now = (await h.stack.api.get(f"/v1/runs/{run['id']}")).json()
            async with httpx.AsyncClient() as client:
                listed = await client.get(
                    f"{root}/gcs/storage/v1/b/{cloud.BUCKET}/o", params={"prefix": f"docai/{run['id']}/"}
                )
            return now["vendor_deleted"] is True and not listed.json().get("items")

        await eventually(told, what="the staged document and the output deleted")

    @pytest.fixture
    async def vendor_root(self, servers: Servers, tmp_path: Path) -> str:
        config = SimulatorConfig(**SIM)
        root = await servers.start(create_simulator(config), free_port())
        await _storage_started(root)
        async with httpx.AsyncClient() as client:
            info = (await client.post(f"{root}/_sim/google/service-account")).raise_for_status().json()
        key = tmp_path / "sa.json"
        key.write_text(json.dumps(info))
        # google-auth's token exchange, once before the clock starts (its imports take a while).
        await gcp.GoogleTokens(str(key)).token()
        env = cloud.google_docai_settings(cloud.Reach(config, root, tmp_path))
        env["HOOKBRIDGE_GOOGLE_DOCAI_CREDENTIALS_FILE"] = str(key)
        self._env = {
            k: v
            for k, v in env.items()
            if not k.startswith(("HOOKBRIDGE_SIM_", "HOOKBRIDGE_GOOGLE_DOCAI_BASE"))
        }

        return root

    def env(self) -> dict[str, str]:
        return self._env

    def run_body(self, filename: str) -> dict[str, Any]:
        body = {**super().run_body(filename), **cloud.DEMO_RUNS["google_docai"]}
        if filename.startswith(PRESTAGED):  # already in the bucket: the run's first request is Google's
            body["document"] = {"url": f"gs://{cloud.BUCKET}/{filename}"}
        return body


@pytest.mark.parametrize(
    ("suite", "adapter"), [(TestTextract, TextractAdapter), (TestGoogleDocai, GoogleDocaiAdapter)]
)
def test_the_suites_idempotency_is_the_adapters(suite: type[VendorConformance], adapter: type) -> None:
    assert suite.submit_idempotent is adapter.submit_idempotent
