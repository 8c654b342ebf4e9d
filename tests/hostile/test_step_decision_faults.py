"""An answer the core cannot decide (or the store cannot write) ends like any other fault of a step:
bounded by its kind, never a lease that comes back for ever, and a submit the vendor took is not sent
again to a vendor without idempotency.

No HTTP answer reaches the core unread this way (the shipped adapters type every value they pass on), so
the vendor here is an adapter object, as a third-party plugin is one: the plugin seam is the boundary, and
this plugin hands the core values of the wrong type. The store, its scripts and Redis are real.
"""

from __future__ import annotations

from typing import Any

import pytest

from service.core.clock import ManualClock
from service.core.lifecycle import Transition
from service.core.records import Run, replace
from service.store import ClaimedRun, Store, keys
from service.vendors import base
from service.vendors.base import Call, PollResult, Progress, SubmitRequest, Submitted
from service.worker.steps import RunStepper
from tests.store.test_lua import T0, _next, _run, store

__all__ = ["store"]  # the fixture, shared with test_lua.py


class CarelessPlugin:
    """A plugin adapter whose answers carry values of the wrong type (a percent as text, a Retry-After
    as a word): the adapter's own bug, which the core meets when it decides."""

    name = "nutrient"
    supports_cancel = False

    def __init__(self, *, idempotent: bool) -> None:
        self.submit_idempotent = idempotent
        self.submits = 0

    async def submit(self, request: SubmitRequest, call: Call = base.NO_CALL) -> Submitted:
        self.submits += 1
        return Submitted("v-7", "queued", retry_after_s="soon")  # type: ignore[arg-type]

    async def poll(self, vendor_run_id: str, state: dict[str, Any], call: Call = base.NO_CALL) -> PollResult:
        return PollResult(base.RUNNING, "processing", progress=Progress(percent="40%"))  # type: ignore[arg-type]

    async def fetch_result(self, vendor_run_id: str, state: dict[str, Any], call: Call = base.NO_CALL) -> Any:
        raise AssertionError("not asked")

    async def cancel(self, vendor_run_id: str, state: dict[str, Any], call: Call = base.NO_CALL) -> None:
        raise AssertionError("not asked")


async def _step(store: Store, run: Run, plugin: CarelessPlugin) -> Run:
    stepper = RunStepper(store.runs, store.settings, {"nutrient": plugin}, clock=ManualClock(T0 / 1000 + 1))
    await stepper.step(ClaimedRun(run, due_ms=T0, slot_ms=0))  # returns: nothing for a lease to hand back
    await stepper.close()
    stored = await store.runs.get_run(run.id)
    assert stored is not None
    return stored


async def test_a_poll_answer_the_core_cannot_decide_is_a_transient_fault(store: Store) -> None:
    run = await _run(store)
    polled = replace(_next(run, "running"), vendor_run_id="v-1")
    await store.runs.transition(Transition(polled, 0))
    after = await _step(store, polled, CarelessPlugin(idempotent=True))
    assert (after.status, after.transient, after.version) == ("running", 1, polled.version + 1)
    due = await store.redis.zscore(keys.due_runs("nutrient", keys.shard_of(run.id)), run.id)
    assert due is not None and due > T0  # again after the fault's backoff, not at once


@pytest.mark.parametrize(
    ("idempotent", "status", "code"), [(False, "failed", "vendor_submit_ambiguous"), (True, "queued", None)]
)
async def test_a_submit_answer_the_core_cannot_decide_is_not_sent_again_without_idempotency(
    store: Store, idempotent: bool, status: str, code: str | None
) -> None:
    run = await _run(store)
    plugin = CarelessPlugin(idempotent=idempotent)
    after = await _step(store, run, plugin)
    assert plugin.submits == 1
    assert after.status == status
    assert (after.error or {}).get("code") == code
    if code:  # the vendor's job is named, for the client to reconcile
        assert after.error["details"] == {"vendor_answer": "v-7"}  # type: ignore[index]
    else:
        assert after.transient == 1
