"""What a finished run keeps in Redis for RETENTION_S, on a real redis-server: nothing twice, nothing the
reads no longer need, and every read (the run, its result, its events, its deliveries and their attempts)
answering as before. The run goes through the decisions the worker makes (``core.runs``) and the store
calls the worker and the deliverer make, so a change to what is written shows here."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from service.core import domain, runs
from service.core.backoff import VendorPolicy
from service.core.domain import AttemptOutcome
from service.core.lifecycle import Transition, new_run
from service.core.records import Attempt, Run, Subscription
from service.store import Applied, Store, connect, keys
from service.vendors import base
from service.vendors.registry import load_settings
from tests.conftest import base_env

RETENTION_S = 3600


class Jitter:
    def uniform(self, a: float, b: float) -> float:
        return a


@pytest.fixture
async def store(redis_url: str) -> AsyncIterator[Store]:
    settings = load_settings(base_env(redis_url, HOOKBRIDGE_RETENTION_S=str(RETENTION_S)))
    s = Store(connect(settings), settings)
    try:
        yield s
    finally:
        await s.close()


async def _apply(store: Store, change: Transition) -> Run:
    assert isinstance(await store.runs.transition(change), Applied)
    return change.run


async def _finished(store: Store, result: Any, *, polls: int = 12) -> Run:
    """A Nutrient run submitted, polled ``polls`` times (progress moving) and done with ``result``, and
    its callback delivered to the client's one subscription (terminal events). Its times lie in the past
    (polls 30 s apart), as the worker's would: its callback is due."""
    now = domain.now_ms() - 1_000_000
    sub = Subscription(
        id=domain.new_id("sub"),
        client="alice",
        url="http://127.0.0.1:9/hook",
        secrets="[]",
        created_at=now,
        updated_at=now,
    )
    assert await store.subscriptions.create_subscription(sub, max_count=10)
    run = new_run(
        run_id=domain.new_id("run"),
        client="alice",
        vendor="nutrient",
        operation="extract",
        document={"url": "https://example.com/a.pdf", "media_type": "application/pdf"},
        options={},
        metadata={"order": "A-1"},
        subscription_ids=[],
        zero_retention=False,
        now_ms=now,
    )
    assert await store.runs.create_run(run, None, None) is None
    policy: VendorPolicy = store.settings.vendor("nutrient")
    limits = store.settings.run_policy
    accepted = base.Submitted(vendor_run_id="5d41402a-bc4b-2a76-b971-9d911017c592", vendor_status="queued")
    at = now + 40
    run = await _apply(store, runs.after_submit(run, accepted, {}, policy, now_ms=at, jitter=Jitter()))
    for k in range(polls):
        at += 30_000
        answer = base.PollResult(
            base.RUNNING, "running", progress=base.Progress(percent=5.0 * k, phase="ocr")
        )
        run = await _apply(store, runs.after_poll(run, answer, policy, limits, now_ms=at, jitter=Jitter()))
    done = base.PollResult(
        base.SUCCEEDED,
        "done",
        needs_fetch=True,
        usage={"credits": 1.0, "reported": {"data_extraction_credits": {"cost": 1.0}}},
    )
    change = runs.after_poll(run, done, policy, limits, now_ms=at + 30_000, jitter=Jitter(), payload=result)
    run = await _apply(store, change)
    claimed, _ = await store.deliveries.claim_deliveries(domain.now_ms(), 10, 30_000)
    assert [c.delivery.run_id for c in claimed] == [run.id]
    attempt = Attempt(
        at=domain.rfc3339(now) or "", status_code=204, duration_ms=3.4, error=None, response_body=""
    )
    await store.deliveries.record_attempt(
        claimed[0].delivery,
        AttemptOutcome.SUCCEEDED,
        now_ms=domain.now_ms(),
        attempt=attempt,
        status_code=204,
    )
    return run


RESULT = {
    "output": {
        "fields": {
            "invoice_number": "INV-5d4140",
            "total": 1234.5,
            "currency": "USD",
            "pages": 2,
            "sha256": "5d41402abc4b2a76b9719d911017c592" * 2,
        }
    },
    "usage": {"data_extraction_credits": {"cost": 1.0}},
}


async def test_a_result_inline_in_its_event_is_kept_there_alone_and_served_as_before(store: Store) -> None:
    run = await _finished(store, RESULT)
    assert not await store.redis.exists(keys.result(run.id))
    stored = await store.runs.get_run(run.id)
    assert stored is not None
    assert await store.runs.get_result(stored) == json.dumps(RESULT, separators=(",", ":")).encode()
    # The event, and with it the result, goes when the run's retention ends: the result is gone then too.
    assert 0 < await store.redis.pttl(keys.event(run.event_ids[-1])) <= RETENTION_S * 1000
    await store.redis.delete(keys.event(run.event_ids[-1]))
    assert await store.runs.get_result(stored) is None


async def test_a_result_too_large_to_go_inline_keeps_its_own_key(store: Store) -> None:
    big = {"text": "x" * (store.settings.max_inline_result_bytes + 1)}
    run = await _finished(store, big, polls=1)
    assert await store.redis.exists(keys.result(run.id))
    stored = await store.runs.get_run(run.id)
    assert stored is not None
    assert await store.runs.get_result(stored) == json.dumps(big, separators=(",", ":")).encode()


async def test_a_final_delivery_keeps_only_what_its_reads_need_and_reads_as_before(store: Store) -> None:
    run = await _finished(store, RESULT, polls=1)
    [dlv_id] = [d.decode() for d in await store.redis.zrange(keys.run_deliveries(run.id), 0, -1)]
    stored = {k.decode(): v.decode() for k, v in (await store.redis.hgetall(keys.delivery(dlv_id))).items()}
    # Its next attempt's time, its place in the chain, its pending count and a series never restarted:
    # only a pending delivery reads them.
    assert {"next_at", "chained", "counted", "series"}.isdisjoint(stored), stored
    delivery = await store.deliveries.get_delivery(dlv_id)
    assert delivery is not None
    assert (delivery.status, delivery.attempts, delivery.series, delivery.next_attempt_at) == (
        "succeeded",
        1,
        0,
        None,
    )
    assert delivery.last_status_code == 204
    [attempt] = await store.deliveries.delivery_attempts(dlv_id)
    assert attempt.public() == {
        "at": attempt.at,
        "status_code": 204,
        "duration_ms": 3.4,
        "error": None,
        "response_body": "",
    }
    # Sent again by hand: pending on a new series, then delivered again, as before.
    assert isinstance(await store.deliveries.retry_delivery(dlv_id, domain.now_ms()), Applied)
    again = await store.deliveries.get_delivery(dlv_id)
    assert again is not None and (again.status, again.series) == ("pending", 1)
    claimed, _ = await store.deliveries.claim_deliveries(domain.now_ms(), 10, 30_000)
    assert [c.delivery.id for c in claimed] == [dlv_id]
    failed = Attempt(at=attempt.at, status_code=None, duration_ms=1.0, error="refused", response_body="")
    await store.deliveries.record_attempt(
        claimed[0].delivery, AttemptOutcome.FAILED, now_ms=domain.now_ms(), attempt=failed
    )
    last = await store.deliveries.get_delivery(dlv_id)
    assert last is not None
    assert (last.status, last.attempts, last.series, last.last_status_code) == ("failed", 2, 1, None)
    assert [a.public() for a in await store.deliveries.delivery_attempts(dlv_id)][1] == failed.public()


async def test_a_finished_runs_own_keys_take_under_2200_bytes(store: Store) -> None:
    """MEMORY USAGE (memory, not time: a bound that holds on a busy machine) of what a finished run keeps
    in keys of its own for RETENTION_S: its record with a full trail, its events, its delivery and the
    delivery's attempts, its index of deliveries (and its result's key, were it kept apart). Before the
    finished run was compacted they took ~3,140 bytes: the record 1,112, the result 338, run.submitted
    280, run.succeeded 536, the delivery 408 and its attempts 296, the index 168; ~2,340 before a
    delivery's first attempt went into its hash (its attempt list, 264, is not made); ~2,070 now
    (``python -m bench.memory`` gives the rest: the feed's entries, the shared indexes)."""
    run = await _finished(store, RESULT)
    [dlv_id] = [d.decode() for d in await store.redis.zrange(keys.run_deliveries(run.id), 0, -1)]
    own = [
        keys.run(run.id),
        keys.result(run.id),
        *map(keys.event, run.event_ids),
        keys.delivery(dlv_id),
        keys.delivery_attempts(dlv_id),
        keys.run_deliveries(run.id),
    ]
    sizes = {key: int(await store.redis.memory_usage(key, samples=0) or 0) for key in own}
    assert sum(sizes.values()) < 2200, sizes
    # What the reads give is whole: the record with its full trail and both events.
    stored = await store.runs.get_run(run.id)
    assert stored is not None and stored.trail_dropped > 0 and len(stored.trail) == 10
    assert [body["type"] for _, body in await store.runs.run_events(stored)] == [
        "run.submitted",
        "run.succeeded",
    ]
