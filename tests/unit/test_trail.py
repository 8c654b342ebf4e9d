"""The vendor trail's bounds: the first entries and the last ones, a count of those left out between."""

from __future__ import annotations

import json

from service import lifecycle, trail
from service.lifecycle import Transition
from service.records import Run


def _change() -> Transition:
    run = lifecycle.new_run(
        run_id="run_1",
        client="alice",
        vendor="nutrient",
        operation="extract",
        document={},
        options={},
        metadata={},
        subscription_ids=[],
        zero_retention=False,
        now_ms=0,
    )
    return Transition(run, 0)


def test_the_trail_keeps_its_head_and_tail_and_counts_what_it_drops() -> None:
    change = trail.record(
        _change(), "submitted", at_ms=1_000, vendor_status="queued", latency_ms=12.4, detail="vr_1"
    )
    for n in range(50):
        change = trail.record(change, "poll", at_ms=2_000 + n, vendor_status="running", latency_ms=n)
    change = trail.record(change, "rate_limited", at_ms=9_000, detail="retry after 2s")
    change = trail.record(change, "result", at_ms=10_000, vendor_status="done" * 100, latency_ms=30)
    shown = trail.public(change.run)
    entries = shown["trail"]
    assert len(entries) == trail.HEAD + trail.TAIL
    assert shown["trail_dropped"] == 53 - len(entries)
    assert entries[0] == {
        "at": "1970-01-01T00:00:01.000Z",
        "kind": "submitted",
        "vendor_status": "queued",
        "latency_ms": 12,
        "detail": "vr_1",
    }
    assert entries[1]["kind"] == "poll" and entries[1]["latency_ms"] == 0
    assert [e["kind"] for e in entries[-2:]] == ["rate_limited", "result"]
    assert entries[-2]["vendor_status"] is None and entries[-2]["latency_ms"] is None
    assert len(entries[-1]["vendor_status"]) == trail.MAX_TEXT
    assert shown["rate_limited"] == 1
    # Compact at rest: the whole trail of a long run stays a few hundred bytes.
    assert len(json.dumps(change.run.trail, separators=(",", ":"))) < 600


def test_recording_never_edits_the_previous_run() -> None:
    old = trail.record(_change(), "submitted", at_ms=1)
    new = trail.record(old, "poll", at_ms=2)
    assert len(old.run.trail) == 1 and len(new.run.trail) == 2
    assert trail.public(_change().run) == {"trail": [], "trail_dropped": 0, "rate_limited": 0}
    # Stored, read back: the same trail (the record's codec keeps it).
    assert Run.from_json(new.run.to_json()).trail == new.run.trail
