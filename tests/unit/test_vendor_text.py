"""Vendor text is data, not trusted: cut short and scrubbed of every configured credential, in the
encodings a vendor might echo it in (service/vendors/text.py)."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from dataclasses import replace
from urllib.parse import quote

import pytest

from service.vendors import text
from service.vendors.base import FileResult, PollResult, Progress, Submitted, VendorRejected

KEY = "sk-live/9f8e+7d6c5b4a3=="


@pytest.fixture(autouse=True)
def registered() -> Iterator[None]:
    text.forget()
    text.register([KEY, f"Bearer {KEY}"])
    yield
    text.forget()


@pytest.mark.parametrize(
    "echo",
    [
        KEY,
        f"Bearer {KEY}",
        quote(KEY, safe=""),
        base64.b64encode(KEY.encode()).decode(),
        base64.b64encode(f"{KEY}:".encode()).decode(),  # HTTP Basic, the key as user
        base64.b64encode(f":{KEY}".encode()).decode(),  # HTTP Basic, the key as password
        json.dumps(KEY)[1:-1],
    ],
)
def test_every_encoding_of_a_key_is_scrubbed(echo: str) -> None:
    said = text.clean(f"invalid credentials: {echo} (Authorization header)")
    assert KEY not in said and echo not in said
    assert text.REDACTED in said


def test_vendor_text_is_cut_to_a_few_kb() -> None:
    said = text.clean("x" * (1024 * 1024))
    assert len(said) <= text.MAX_TEXT
    assert said.endswith("[truncated]")


def test_a_key_across_the_cut_is_not_left_half_in() -> None:
    said = text.clean("y" * (text.MAX_TEXT - 5) + KEY)
    assert KEY[:5] not in said.replace("y", "")


def test_error_details_are_scrubbed_and_bounded() -> None:
    details = {"echo": {"headers": [f"Bearer {KEY}"]}, KEY: 1}
    cleaned = text.clean_json(details)
    assert KEY not in json.dumps(cleaned)
    big = text.clean_json({"blob": "z" * 100_000})
    assert len(json.dumps(big)) < text.MAX_DETAILS_BYTES
    assert big["truncated"] is True


def test_every_vendor_error_is_cleaned_as_it_is_made() -> None:
    exc = VendorRejected(f"401: bad token Bearer {KEY}" + "!" * 2_000_000)
    assert KEY not in exc.message and KEY not in str(exc)
    assert len(exc.message) <= text.MAX_TEXT


def test_short_secrets_are_not_scrubbed_everywhere() -> None:
    text.register(["ab"])
    assert text.clean("a tab") == "a tab"


# A whole answer: every field the vendor wrote is made safe, the rest left as it came ------------------
def test_a_poll_answer_is_made_safe_field_by_field() -> None:
    echo = f"bad token Bearer {KEY}"
    answer = PollResult(
        "failed",
        vendor_status="s" * 500,
        progress=Progress(percent=50, phase=echo, message="m" * 1_000_000),
        error=echo,
        error_details={"echo": echo},
        usage={"note": echo, "credits": 3},
        result={"text": echo, "long": "x" * 100_000},
        state={"cursor": "c"},
    )
    safe = text.safe_poll(answer)
    assert KEY not in json.dumps(
        [safe.vendor_status, safe.progress.phase, safe.error, safe.error_details, safe.usage, safe.result]
    )
    assert len(safe.vendor_status or "") <= 200 and len(safe.progress.message or "") <= text.MAX_TEXT
    assert safe.result["long"] == "x" * 100_000  # a result is scrubbed, never cut
    assert safe.usage["credits"] == 3 and safe.progress.percent == 50
    assert (safe.status, safe.state) == ("failed", {"cursor": "c"})


# The fast path: an answer with nothing to clean comes back as it is; one unsafe field, anywhere, and the
# answer is copied with that field made safe (the rest as they came).
_RUNNING = PollResult("running", vendor_status="running", progress=Progress(percent=5, phase="ocr"))


@pytest.mark.parametrize(
    ("field", "unsafe", "safe_of"),
    [
        ("vendor_status", f"running {KEY}", lambda r: r.vendor_status),
        ("vendor_status", "s" * 201, lambda r: r.vendor_status),
        ("progress", Progress(percent=5, phase=f"ocr {KEY}"), lambda r: r.progress.phase),
        ("progress", Progress(percent=5, phase="ocr", message="m" * 5_000), lambda r: r.progress.message),
        ("error", f"failed {KEY}", lambda r: r.error),
        ("error_details", {"echo": KEY}, lambda r: r.error_details),
        ("usage", {"note": KEY}, lambda r: r.usage),
        ("result", {"text": KEY}, lambda r: r.result),
    ],
)
def test_a_poll_answer_is_copied_only_where_a_field_needs_cleaning(
    field: str, unsafe: object, safe_of: object
) -> None:
    assert text.safe_poll(_RUNNING) is _RUNNING
    answer = replace(_RUNNING, **{field: unsafe})
    safe = text.safe_poll(answer)
    assert safe is not answer
    kept = json.dumps(safe_of(safe))  # type: ignore[operator]
    assert KEY not in kept and len(kept) < 4_000
    assert (safe.status, safe.progress.percent) == ("running", 5)


def test_an_answer_with_nothing_unsafe_in_any_field_comes_back_as_it_is() -> None:
    answer = PollResult(
        "succeeded",
        vendor_status="done",
        progress=Progress(percent=100, phase="done", message="ok"),
        error=None,
        usage={"credits": 1},
        result={"text": "hello"},
    )
    text.forget()  # no credential registered: usage and result need no copy either
    assert text.safe_poll(answer) is answer


def test_a_submit_answer_and_a_file_result_are_made_safe() -> None:
    accepted = text.safe_submit(Submitted("v-1", f"queued {KEY}", {"k": 1}))
    assert KEY not in (accepted.vendor_status or "") and accepted.vendor_run_id == "v-1"
    file = text.safe_result(FileResult(b"%PDF", "application/pdf", {"by": KEY}))
    assert file.content == b"%PDF" and KEY not in json.dumps(file.data)
