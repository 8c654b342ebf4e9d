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
    assert Run.from_json(new.run.to_json(), "run_1").trail == new.run.trail


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
        assert Run.from_json(change.run.to_json(), "run_1").trail == change.run.trail


def test_a_full_trail_of_polls_that_find_the_same_status_is_small() -> None:
    change = trail.record(_change(), "submitted", at_ms=1_000, vendor_status="queued", latency_ms=12)
    for n in range(40):
        at = 60_000 + 30_000 * n
        change = trail.record(change, "poll", at_ms=at, vendor_status="processing", latency_ms=3)
    stored = json.dumps(change.run.trail, separators=(",", ":"))
    # The head's poll and the first entry of the tail spell it out; the other seven say 0 (a poll: 1).
    assert stored.count('"processing"') == 2 and stored.count(",1,0,") == trail.TAIL - 1
    assert len(stored) < 200, stored  # 241 with the kinds spelled out
    assert {e["vendor_status"] for e in trail.public(change.run)["trail"][1:]} == {"processing"}


# The kinds' places as stored trails hold them: pinned, since a record written today is read for
# RETENTION_S by every version after. A new kind goes last.
STORED = ["submitted", "poll", "rate_limited", "progress", "result", "error", "timeout"]


def test_a_kind_is_stored_as_its_place_and_shown_as_its_word() -> None:
    assert list(trail.STORED_KINDS) == STORED
    assert set(trail.STORED_KINDS) == set(trail.KINDS)  # every kind the API may show has a place
    change = _change()
    for n, kind in enumerate(STORED):
        change = trail.record(change, kind, at_ms=1_000 + n, vendor_status="s", latency_ms=1)
    assert [entry[1] for entry in change.run.trail[-len(STORED) :]] == list(range(len(STORED)))
    assert [e["kind"] for e in trail.public(change.run)["trail"]] == STORED
    assert '"poll"' not in change.run.to_json()


def test_a_trail_stored_with_its_kinds_spelled_out_reads_as_before() -> None:
    """A record written before the kinds' places (every entry's kind a word) shows the same trail, and a
    new entry after those words is stored as a place."""
    change = trail.record(_change(), "submitted", at_ms=1_000, vendor_status="queued", latency_ms=12)
    for n in range(12):
        kind = "progress" if n % 3 else "poll"
        change = trail.record(change, kind, at_ms=2_000 + n, vendor_status="running", latency_ms=n)
    spelled = [[e[0], STORED[e[1]], *e[2:]] for e in change.run.trail]
    old = Run.from_json(
        change.run.to_json().replace(
            json.dumps(change.run.trail, separators=(",", ":")), json.dumps(spelled, separators=(",", ":"))
        ),
        "run_1",
    )
    assert old.trail == spelled and trail.public(old) == trail.public(change.run)
    later = trail.record(Transition(old, old.version), "result", at_ms=9_000, vendor_status="done")
    assert later.run.trail[-1][1] == STORED.index("result")
    assert (
        trail.public(later.run)["trail"][-2:]
        == trail.public(trail.record(change, "result", at_ms=9_000, vendor_status="done").run)["trail"][-2:]
    )
