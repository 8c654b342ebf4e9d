"""The vendor trail's bounds: the first entries and the last ones, a count of those left out between."""

from __future__ import annotations

import json

from service.core import lifecycle, trail
from service.core.lifecycle import Transition
from service.core.records import Run


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


def _naive(steps: list[tuple[str, int, str | None, int | None, str | None]]) -> list[dict[str, object]]:
    """The trail as the first version kept it (every status spelled out), as the API shows it."""
    kept: list[dict[str, object]] = []
    for kind, at, status, latency, detail in steps:
        if len(kept) >= trail.HEAD + trail.TAIL:
            del kept[trail.HEAD]
        kept.append(
            {
                "at": f"1970-01-01T00:00:{at // 1000:02d}.{at % 1000:03d}Z",
                "kind": kind,
                "vendor_status": status,
                "latency_ms": latency,
                "detail": detail,
            }
        )
    return kept


def test_a_repeated_status_is_stored_once_and_shown_as_it_was() -> None:
    """Compaction (``SAME`` for a status that repeats the entry before it) never changes what is shown,
    also across the entries dropped between the head and the tail: against the trail as first kept, on
    random sequences of kinds and statuses."""
    import random

    rng = random.Random(16)
    for _ in range(300):
        steps: list[tuple[str, int, str | None, int | None, str | None]] = []
        change = _change()
        for n in range(rng.randint(0, 30)):
            kind = rng.choice(["submitted", "poll", "poll", "progress", "rate_limited", "error"])
            status = rng.choice(["queued", "processing", "processing", None])
            latency = rng.choice([None, n])
            detail = rng.choice([None, None, "x"])
            steps.append((kind, 1_000 + n, status, latency, detail))
            change = trail.record(
                change, kind, at_ms=1_000 + n, vendor_status=status, latency_ms=latency, detail=detail
            )
        assert trail.public(change.run)["trail"] == _naive(steps)
        assert Run.from_json(change.run.to_json()).trail == change.run.trail


def test_a_full_trail_of_polls_that_find_the_same_status_is_small() -> None:
    change = trail.record(_change(), "submitted", at_ms=1_000, vendor_status="queued", latency_ms=12)
    for n in range(40):
        at = 60_000 + 30_000 * n
        change = trail.record(change, "poll", at_ms=at, vendor_status="processing", latency_ms=3)
    stored = json.dumps(change.run.trail, separators=(",", ":"))
    # The head's poll and the first entry of the tail spell it out; the other seven say 0.
    assert stored.count('"processing"') == 2 and stored.count(",0,") == trail.TAIL - 1
    assert len(stored) < 260, stored
    assert {e["vendor_status"] for e in trail.public(change.run)["trail"][1:]} == {"processing"}
