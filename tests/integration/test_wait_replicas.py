"""``REDIS_WAIT_REPLICAS=1`` end to end on a real primary and replica (contract section 10): a submit's
202, a subscription's create, change and delete return once the replica has them; with the replica
frozen the API answers 503 with Retry-After, the write may exist, and a retry with the same
Idempotency-Key returns it; /readyz is not ready while the primary has no replica; the worker's
transitions of one turn wait once, not once per run."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator

import pytest

from service.core.lifecycle import Transition
from service.core.records import Run, replace
from service.store import Applied, Store, connect
from service.store.connection import ReplicasBehind
from service.vendors.registry import load_settings
from service.worker.transitions import TransitionBatcher
from tests.conftest import Receiver, StackFactory, base_env
from tests.redis_pair import Pair, command, stopped
from tests.store.test_lua import _event, _next, _run, _sub

WAIT = {"HOOKBRIDGE_REDIS_WAIT_REPLICAS": "1", "HOOKBRIDGE_REDIS_WAIT_TIMEOUT_MS": "1000"}


@pytest.fixture(scope="module")
def pair() -> Iterator[Pair]:
    with Pair.started() as found:
        yield found


def _calls(pair: Pair, name: str) -> int:
    """How many times the primary has run the command ``name`` (``INFO commandstats``)."""
    return int(command(pair.primary.port, "INFO", "commandstats").get(f"cmdstat_{name}", {}).get("calls", 0))


def _waits(pair: Pair) -> int:
    return _calls(pair, "wait")


async def test_shown_writes_wait_and_a_replica_behind_is_a_503_that_a_retry_settles(
    pair: Pair, make_stack: StackFactory, receiver: Receiver
) -> None:
    stack = await make_stack(worker=False, HOOKBRIDGE_REDIS_URL=pair.primary.url, **WAIT)
    assert (await stack.api.get("/readyz")).status_code == 200
    sub = await stack.subscribe(receiver.url)
    before = _waits(pair)
    run = await stack.submit("nutrient")
    assert _waits(pair) >= before + 1  # the 202 came after a WAIT
    body = {"vendor": "nutrient", "document": {"url": "https://example.com/a.pdf"}}
    with stopped(pair.replica.process):
        held = await stack.api.post("/v1/runs", json=body, headers={"Idempotency-Key": "behind-1"})
        assert held.status_code == 503, held.text
        assert int(held.headers["retry-after"]) >= 1 and "may exist" in held.json()["detail"]
        patched = await stack.api.patch(f"/v1/subscriptions/{sub['id']}", json={"description": "x"})
        assert patched.status_code == 503, patched.text
        # Reads need no replica.
        assert (await stack.api.get(f"/v1/runs/{run['id']}")).status_code == 200
    again = await stack.api.post("/v1/runs", json=body, headers={"Idempotency-Key": "behind-1"})
    assert again.status_code in (200, 202), again.text
    listed = (await stack.api.get("/v1/runs", params={"limit": 100})).json()["data"]
    assert sum(1 for r in listed if r["id"] == again.json()["id"]) == 1  # the one written before the 503
    assert (
        await stack.api.patch(f"/v1/subscriptions/{sub['id']}", json={"description": "y"})
    ).status_code == 200
    assert (await stack.api.delete(f"/v1/subscriptions/{sub['id']}")).status_code == 204


async def test_readyz_is_not_ready_while_the_primary_has_too_few_replicas(
    pair: Pair, make_stack: StackFactory
) -> None:
    stack = await make_stack(worker=False, HOOKBRIDGE_REDIS_URL=pair.primary.url, **WAIT)
    pair.detach()
    try:
        answer = await stack.api.get("/readyz")
        assert answer.status_code == 503 and answer.headers["retry-after"] == "1"
        assert answer.json()["status"] == "too few replicas"
    finally:
        pair.attach()
    assert (await stack.api.get("/readyz")).status_code == 200
    plain = await make_stack(worker=False, HOOKBRIDGE_REDIS_URL=pair.primary.url)
    pair.detach()
    try:
        assert (await plain.api.get("/readyz")).status_code == 200  # no replica asked for
    finally:
        pair.attach()


async def test_the_transitions_of_one_turn_wait_once(pair: Pair) -> None:
    settings = load_settings(base_env(pair.primary.url, **WAIT))
    store = Store(connect(settings, durable=True), settings)
    try:
        runs = [await _run(store, f"run_wait_{i}") for i in range(20)]
        batcher = TransitionBatcher(store.runs)
        warm = [await _run(store, f"run_warm_{i}") for i in range(2)]  # its script loaded (NOSCRIPT)
        await asyncio.gather(*(batcher.apply(Transition(_next(r, "processing"), 0)) for r in warm))
        before = _waits(pair)
        outcomes = await asyncio.gather(*(batcher.apply(Transition(_next(r, "processing"), 0)) for r in runs))
        assert outcomes == [Applied()] * 20
        assert _waits(pair) == before + 1
        with stopped(pair.replica.process):
            failed = await asyncio.gather(
                *(batcher.apply(Transition(_next(_next(r, "processing"), "processing"), 1)) for r in runs),
                return_exceptions=True,
            )
        # Every step of the batch learns that its change is not on the replica: none goes on to announce.
        assert all(type(f).__name__ == "ReplicasBehind" for f in failed)
    finally:
        await store.close()


async def test_the_transitions_of_one_turn_and_their_relays_wait_once_each(pair: Pair) -> None:
    """Changes that emit events: the transitions in one call, then each step of the relays of their
    outboxes in one pipeline (the deliveries in the subscriptions' shards, the clients' feeds, then the
    runs' side), so four WAITs for the turn, not one per run; and no callback is announced before them."""
    settings = load_settings(base_env(pair.primary.url, **WAIT))
    store = Store(connect(settings, durable=True), settings)
    try:
        runs = [await _run(store, f"run_relay_{i}", client="walt") for i in range(20)]
        await _sub(store, "sub_walt", client="walt", event_types=json.dumps(["run.*"]))
        batcher = TransitionBatcher(store.runs)

        def change(run: Run) -> Transition:
            event = _event("run.succeeded", event_id=f"evt_{run.id}", beside=run.id)
            return Transition(replace(_next(run, "succeeded"), event_ids=[event.id]), 0, events=[event])

        warm = [await _run(store, f"run_relay_warm_{i}", client="walt") for i in range(2)]  # scripts loaded
        await asyncio.gather(*(batcher.apply(change(r)) for r in warm))
        before = _waits(pair)
        outcomes = await asyncio.gather(*(batcher.apply(change(r)) for r in runs))
        assert outcomes == [Applied(1, ended=True)] * 20
        assert _waits(pair) == before + 4
    finally:
        await store.close()


async def test_an_idle_workers_look_at_its_due_sets_sends_no_wait(pair: Pair) -> None:
    """The look at every shard's head (``due_heads.lua``, a read called as EVALSHA_RO) has no WAIT behind
    it. With the replica frozen after a write that it has not acknowledged (which raised), an idle worker's
    claims of runs and of deliveries on the same connection find nothing and return, where a WAIT would
    wait out ``REDIS_WAIT_TIMEOUT_MS`` for that write again and raise ``ReplicasBehind``."""
    settings = load_settings(base_env(pair.primary.url, **WAIT))
    store = Store(connect(settings, durable=True), settings)
    try:
        await store.runs.heads(["hb:warm"])  # the script loaded (its SCRIPT LOAD is not a write either)
        with stopped(pair.replica.process):
            with pytest.raises(ReplicasBehind):
                await store.redis.set("hb:behind", "1")
            before, looks = _waits(pair), _calls(pair, "evalsha_ro")
            for vendor in ("nutrient", "cloudsquid"):
                claimed, _ = await store.runs.claim_runs(vendor, 1_000, 10, 30_000, 0, 0)
                assert claimed == []
            delivered, _ = await store.deliveries.claim_deliveries(1_000, 10, 30_000)
            assert delivered == []
            assert _waits(pair) == before
            # The looks ran, as reads: one for each claim (each vendor's first, and the deliveries').
            assert _calls(pair, "evalsha_ro") - looks == 3
    finally:
        await store.close()
