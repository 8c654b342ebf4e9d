"""The records' codec: one name per field, defaults left out of storage, records of before still read."""

from __future__ import annotations

import json

import pytest

from service.core import lifecycle
from service.core.records import (
    STORED_NAMES,
    SUBSCRIPTION_HASH,
    Attempt,
    Delivery,
    Run,
    Subscription,
    public_delivery,
    public_run,
    public_subscription,
    replace,
)

T0 = 1_800_000_000_000


def _run() -> Run:
    return lifecycle.new_run(
        run_id="run_1",
        client="alice",
        vendor="nutrient",
        operation="extract",
        document={"url": "https://example.com/a.pdf"},
        options={},
        metadata={"k": "v"},
        subscription_ids=[],
        zero_retention=False,
        now_ms=T0,
    )


def test_a_run_round_trips_and_stores_only_what_differs_from_the_defaults() -> None:
    run = replace(_run(), state={"row": "r1"}, delay_s=1.5, vendor_cancel_pending=True)
    stored = json.loads(run.to_json())
    assert Run.from_json(run.to_json(), run.id) == run
    assert "id" not in stored  # the key names it (hb:run:{id})
    assert {"n", "p", "vr", "tf", "vendor_delete_pending"}.isdisjoint(stored)  # at their defaults
    assert stored["version"] == 0 and stored["status"] == "queued"  # always written: the Lua reads them
    assert stored["st"] == {"row": "r1"} and stored["vendor_cancel_pending"] is True


def test_a_run_stored_before_the_fields_had_one_name_still_reads() -> None:
    old = {
        "_v": 3,
        "id": "run_1",
        "client": "alice",
        "status": "canceled",
        "vendor": "nutrient",
        "operation": "extract",
        "created_at": T0,
        "updated_at": T0 + 5,
        "_state": {"row": "r1"},
        "_delay": 2.0,
        "_transient": 1,
        "_progress_event_at": T0 + 1,
        "_vendor_cancel": True,
        "_vendor_delete": True,
        "_vendor_attempts": 2,
        "_result_type": "application/zip",
        "a_field_of_a_newer_version": 1,
    }
    run = Run.from_json(json.dumps(old))
    assert (run.version, run.state, run.delay_s, run.transient) == (3, {"row": "r1"}, 2.0, 1)
    assert run.progress_event_at == T0 + 1 and run.vendor_cancel_pending and run.vendor_delete_pending
    assert (run.vendor_attempts, run.result_type) == (2, "application/zip")
    assert "_v" not in run.to_json() and json.loads(run.to_json())["version"] == 3


# What the pydantic model that the run record was (before issue 16's sixth round) stored for this run:
# the msgspec struct must store the same bytes, since old and new records share Redis and the Lua scripts.
PYDANTIC_ERA = (
    '{"id":"run_1","client":"alice","vendor":"nutrient","operation":"extract","created_at":1800000000000,'
    '"updated_at":1800000000005,"status":"running","version":7,"vendor_run_id":"job_ü","vendor_status":'
    '"processing","progress":{"percent":40.5,"phase":"ocr","message":null},"metadata":{"k":"v","emoji":"😀"},'
    '"polls":3,"usage":{"credits":1180591620717411303424,"ratio":0.1},"options":{"language":"en"},"state":'
    '{"row":[1,null,true]},"delay_s":1.5,"transient":1,"trail":[[63,"submitted","queued",25],[30063,"poll",'
    '0,3]],"trail_dropped":2,"event_ids":["evt_1"]}'
)


def test_a_run_is_stored_byte_for_byte_as_the_pydantic_record_stored_it() -> None:
    run = Run(
        id="run_1",
        client="alice",
        vendor="nutrient",
        operation="extract",
        created_at=T0,
        updated_at=T0 + 5,
        status="running",
        version=7,
        vendor_run_id="job_ü",
        vendor_status="processing",
        progress={"percent": 40.5, "phase": "ocr", "message": None},
        metadata={"k": "v", "emoji": "😀"},
        polls=3,
        usage={"credits": 2**70, "ratio": 0.1},  # past 64 bits: read and written exactly
        options={"language": "en"},
        state={"row": [1, None, True]},
        delay_s=1.5,
        transient=1,
        trail=[[63, "submitted", "queued", 25], [30063, "poll", 0, 3]],
        trail_dropped=2,
        event_ids=["evt_1"],
    )
    # Written before the stored names were short: it still reads, and is written back shorter, every
    # field under its short name but those the scripts read.
    assert Run.from_json(PYDANTIC_ERA) == run and Run.from_json(PYDANTIC_ERA.encode()) == run
    stored = run.to_json()
    assert Run.from_json(stored, "run_1") == run and len(stored) < len(PYDANTIC_ERA) - 120
    assert set(json.loads(stored)) == {STORED_NAMES.get(k, k) for k in json.loads(PYDANTIC_ERA)} - {"id"}
    assert {"vendor", "status", "version"} <= set(json.loads(stored))
    # A record that names its id (written before it was left out) reads the same with the key's id.
    assert Run.from_json(PYDANTIC_ERA, "run_1") == run


@pytest.mark.parametrize("run_id", ["run_1", 'run_"quoted"', "run_ü", "run_\\x"])
def test_a_run_is_stored_without_its_id_and_read_back_with_the_keys(run_id: str) -> None:
    run = replace(_run(), id=run_id, progress={"percent": 1, "phase": None, "message": None})
    stored = run.to_json()
    assert "id" not in json.loads(stored) and json.loads(stored)["c"] == "alice"
    assert Run.from_json(stored, run_id) == run and Run.from_json(stored.encode(), run_id) == run


@pytest.mark.parametrize(
    "raw",
    [
        "not json",
        "[]",
        '{"id": "run_1"}',  # required fields missing
        PYDANTIC_ERA.replace('"version":7', '"version":"7"'),  # a field of the wrong type
        PYDANTIC_ERA.replace('"polls":3', '"polls":true'),
        PYDANTIC_ERA.replace('"version":7', '"_v":"7"'),  # hookbridge 0.x's name, the wrong type
        PYDANTIC_ERA[:-5],  # cut short
        _run().to_json(),  # a stored record, read without the id of its key
        "{}",
    ],
)
def test_what_is_not_a_run_record_is_a_value_error(raw: str) -> None:
    with pytest.raises(ValueError, match="not a run record"):
        Run.from_json(raw)


def test_public_shapes_show_no_internals_and_times_in_rfc3339() -> None:
    view = public_run(replace(_run(), state={"secret": "x"}))
    assert "state" not in view and "client" not in view and "document" not in view
    assert view["created_at"] == "2027-01-15T08:00:00.000Z" and view["completed_at"] is None


def test_a_subscription_hash_round_trips_under_the_scripts_field_names() -> None:
    sub = Subscription(
        id="sub_1",
        client="alice",
        url="https://example.com/hook",
        secrets="[]",
        created_at=T0,
        updated_at=T0,
        event_types=("run.*",),
        rate_limit_per_s=2.5,
        max_in_flight=4,
    )
    stored = sub.to_hash()
    assert set(stored) == set(SUBSCRIPTION_HASH.values())
    assert (stored["rate_per_s"], stored["created"], stored["disabled"]) == ("2.5", str(T0), "0")
    assert Subscription.from_hash(stored) == sub
    assert sub.to_hash(["url"]) == {"url": "https://example.com/hook"}
    view = public_subscription(sub)
    assert view["event_types"] == ["run.*"] and view["rate_limit_per_s"] == 2.5 and "secrets" not in view


def test_a_delivery_reads_from_the_scripts_hash_and_tolerates_a_lost_field() -> None:
    raw = {"id": "dlv_1", "event": "evt_1", "type": "run.failed", "sub": "sub_1", "run": "run_1"}
    raw |= {
        "client": "alice",
        "status": "pending",
        "attempts": "2",
        "created": str(T0),
        "next_at": str(T0 + 5),
    }
    d = Delivery.from_hash(raw)
    assert (d.event_id, d.subscription_id, d.attempts, d.next_attempt_at) == ("evt_1", "sub_1", 2, T0 + 5)
    assert public_delivery(d)["next_attempt_at"] == "2027-01-15T08:00:00.005Z"
    assert Delivery.from_hash({"id": "dlv_2", "status": "failed"}).event_id == ""


@pytest.mark.parametrize("text", ["plain", "Zürich \u2013 東京 ✓", 'a "quoted" \\ line\n', "\u2028"])
def test_an_event_body_is_the_json_the_standard_library_reads_back(text: str) -> None:
    # The body is encoded by msgspec (UTF-8, not escaped): what a receiver parses must be what we meant.
    run = replace(_run(), metadata={"note": text, "big": 2**70, "n": [1, 2.5, None, True]})
    event = lifecycle._event(run, "run.progress", T0 + 5)
    body = json.loads(event.body)
    assert body["type"] == "run.progress"
    assert body["data"]["run"] == json.loads(json.dumps(public_run(run)))
    assert body["data"]["run"]["metadata"]["note"] == text


@pytest.mark.parametrize(
    ("attempt", "short"),
    [
        # What most deliveries' only attempt is: its time in ms, its status code, its duration.
        (Attempt(at="2027-01-15T08:00:00.123Z", status_code=204, duration_ms=3.4), "1800000000123,204,3.4"),
        (Attempt(at="2027-01-15T08:00:00.000Z", status_code=None, duration_ms=0.0), "1800000000000,,0.0"),
        (Attempt(at="2027-01-15T08:00:00.000Z", status_code=500, duration_ms=12.0), "1800000000000,500,12.0"),
        # More than that, or a time that would not read back the same: none (it goes to the list).
        (Attempt(at="2027-01-15T08:00:00.000Z", status_code=None, duration_ms=1.0, error="refused"), None),
        (Attempt(at="2027-01-15T08:00:00.000Z", status_code=500, duration_ms=1.0, response_body="no"), None),
        (Attempt(at="2027-01-15T08:00:00Z", status_code=204, duration_ms=1.0), None),
        (Attempt(at="2027-01-15T09:00:00.000+01:00", status_code=204, duration_ms=1.0), None),
        (Attempt(at="yesterday", status_code=204, duration_ms=1.0), None),
    ],
)
def test_an_attempt_has_a_short_form_only_when_it_reads_back_the_same(
    attempt: Attempt, short: str | None
) -> None:
    assert attempt.short() == short
    if short is not None:
        assert len(short) <= 64  # what a hash keeps in its compact encoding
        assert Attempt.from_short(short) == attempt and Attempt.from_short(short.encode()) == attempt
