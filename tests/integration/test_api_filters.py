"""Filters: runs by creation time (``created_after`` inclusive, ``created_before`` exclusive) and by
``metadata.KEY=VALUE``, combined with the other filters and paged, each read from an index (the listing
zset's scores; an index per metadata pair) rather than found by a scan; a run's deliveries; the delivery
log by ``event_type`` and ``run_id``."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

from service.core import domain
from service.store import keys
from tests.conftest import Receiver, Stack, StackFactory, eventually, store_client


async def _value(value: Any) -> Any:
    return value


def _ms(at: str) -> int:
    return round(datetime.fromisoformat(at).timestamp() * 1000)


async def _ids(stack: Stack, path: str, **params: Any) -> list[str]:
    """Every page of the listing, followed to its end."""
    out: list[str] = []
    cursor = None
    for _ in range(100):
        answer = await stack.api.get(path, params={**params, **({"cursor": cursor} if cursor else {})})
        assert answer.status_code == 200, answer.text
        out += [item["id"] for item in answer.json()["data"]]
        cursor = answer.json()["next_cursor"]
        if not cursor:
            return out
    raise AssertionError("the listing never ended")


async def test_runs_by_metadata_exact_every_pair_combined_and_paged(make_stack: StackFactory) -> None:
    stack = await make_stack(worker=False)
    r1 = await stack.submit(metadata={"order": "A", "team": "x"})
    r2 = await stack.submit("cloudsquid", metadata={"order": "B", "team": "x"})
    r3 = await stack.submit(metadata={"order": "A", "team": "y"})
    r4 = await stack.submit(metadata={"Order": "A", "order.x": "A"})
    await stack.submit()
    cases: list[tuple[list[tuple[str, str]], list[str]]] = [
        ([("metadata.order", "A")], [r3["id"], r1["id"]]),
        ([("metadata.order", "A"), ("metadata.team", "x")], [r1["id"]]),
        ([("metadata.team", "x")], [r2["id"], r1["id"]]),
        ([("metadata.team", "x"), ("vendor", "cloudsquid")], [r2["id"]]),
        ([("metadata.team", "x"), ("status", "succeeded")], []),
        ([("metadata.order", "a")], []),  # case-sensitive
        ([("metadata.Order", "A")], [r4["id"]]),
        ([("metadata.order", "A"), ("metadata.order", "B")], []),  # repeated: all must match
        ([("metadata.order", "")], []),
        ([("metadata.missing", "A")], []),
    ]
    for params, expected in cases:
        for limit in (1, 50):
            answer = await stack.api.get("/v1/runs", params=[*params, ("limit", str(limit))])
            assert answer.status_code == 200, answer.text
        got: list[str] = []
        cursor = None
        while True:
            page_params = [*params, ("limit", "1"), *([("cursor", cursor)] if cursor else [])]
            page = (await stack.api.get("/v1/runs", params=page_params)).json()
            assert len(page["data"]) <= 1
            got += [r["id"] for r in page["data"]]
            cursor = page["next_cursor"]
            if not cursor:
                break
        assert got == expected, params


async def test_the_metadata_filter_reads_its_index_not_a_scan(make_stack: StackFactory) -> None:
    """1,500 newer runs without the pair: a scan of the client's listing gives up after its bound (1,000
    entries read per request) with nothing found; the pair's own index answers at once."""
    stack = await make_stack(worker=False)
    wanted = await stack.submit(metadata={"batch": "2026-11"})
    redis = store_client(stack.redis_url)
    try:
        created = domain.now_ms() + 1
        await redis.zadd(keys.client_runs("alice"), {f"run_filler{i:05d}": created + i for i in range(1500)})
        index = keys.run_metadata("alice", "batch", "2026-11")
        assert [m.decode() for m in await redis.zrange(index, 0, -1)] == [wanted["id"]]
        assert await redis.pttl(index) > 0  # it expires with the runs it names
        scanned = (await stack.api.get("/v1/runs", params={"status": "queued"})).json()
        assert scanned["data"] == [] or wanted["id"] not in [r["id"] for r in scanned["data"]]
        found = (await stack.api.get("/v1/runs", params={"metadata.batch": "2026-11"})).json()
        assert [r["id"] for r in found["data"]] == [wanted["id"]] and found["next_cursor"] is None
        # The time range is read from the scores, so the fillers after it cost nothing either.
        before = domain.rfc3339(created)
        ranged = (await stack.api.get("/v1/runs", params={"created_before": before, "limit": 1})).json()
        assert [r["id"] for r in ranged["data"]] == [wanted["id"]]
    finally:
        await redis.aclose()


async def test_runs_by_creation_time_after_inclusive_before_exclusive(make_stack: StackFactory) -> None:
    stack = await make_stack(worker=False)
    runs = []
    for _ in range(4):
        runs.append(await stack.submit(metadata={"t": "1"}))
        await eventually(
            lambda: _value(domain.now_ms() > _ms(runs[-1]["created_at"])),
            what="the next millisecond",
        )
    at = [r["created_at"] for r in runs]
    ids = [r["id"] for r in runs]
    assert await _ids(stack, "/v1/runs", created_after=at[1]) == ids[:0:-1]
    assert await _ids(stack, "/v1/runs", created_before=at[2]) == [ids[1], ids[0]]
    assert await _ids(stack, "/v1/runs", created_after=at[1], created_before=at[3], limit=1) == [
        ids[2],
        ids[1],
    ]
    assert await _ids(stack, "/v1/runs", created_after=at[1], created_before=at[1]) == []
    # The same instant written with another offset.
    shifted = datetime.fromisoformat(at[2]).astimezone(timezone(timedelta(hours=2)))
    assert await _ids(stack, "/v1/runs", created_after=shifted.isoformat(timespec="milliseconds")) == [
        ids[3],
        ids[2],
    ]
    # Combined with metadata and status.
    assert await _ids(stack, "/v1/runs", created_after=at[2], status="queued", **{"metadata.t": "1"}) == [
        ids[3],
        ids[2],
    ]
    for bad in ("2026-01-01T00:00:00", "2026-01-01", "1767225600", "yesterday", "2026-13-01T00:00:00Z", ""):
        for name in ("created_after", "created_before"):
            answer = await stack.api.get("/v1/runs", params={name: bad})
            assert answer.status_code == 422, (name, bad, answer.text)
            assert answer.json()["code"] == "validation_error"
            assert answer.json()["errors"][0]["field"] == name
    for params in ({"metadata.a b": "1"}, {"metadata.": "1"}, {"metadata.k": "x" * 501}):
        answer = await stack.api.get("/v1/runs", params=params)
        assert answer.status_code == 422, (params, answer.text)
    too_many = {f"metadata.k{i}": "v" for i in range(51)}
    assert (await stack.api.get("/v1/runs", params=too_many)).status_code == 422


async def test_a_runs_deliveries_and_the_delivery_log_by_event_type_and_run(
    stack: Stack, receiver: Receiver
) -> None:
    everything = await stack.subscribe(receiver.url, event_types=["run.*"])
    terminal = await stack.subscribe(receiver.url)
    run = await stack.submit()
    other = await stack.submit()
    for r in (run, other):
        await stack.wait_status(r["id"], "succeeded")

    async def settled() -> list[str] | None:
        ids = await _ids(stack, f"/v1/runs/{run['id']}/deliveries", limit=1)
        listed = [(await stack.api.get(f"/v1/deliveries/{i}")).json() for i in ids]
        return ids if listed and all(d["status"] == "succeeded" for d in listed) and len(ids) >= 3 else None

    ids = await eventually(settled, what="the run's deliveries")
    listed = [(await stack.api.get(f"/v1/deliveries/{i}")).json() for i in ids]
    assert {d["run_id"] for d in listed} == {run["id"]}
    assert {d["subscription_id"] for d in listed} == {everything["id"], terminal["id"]}
    # Newest first; the terminal event went to both subscriptions.
    assert [d["created_at"] for d in listed] == sorted((d["created_at"] for d in listed), reverse=True)
    assert sum(d["event_type"] == "run.succeeded" for d in listed) == 2
    assert (await stack.bob.get(f"/v1/runs/{run['id']}/deliveries")).status_code == 404

    log = f"/v1/subscriptions/{everything['id']}/deliveries"
    mine = await _ids(stack, log, run_id=run["id"])
    assert mine and set(mine) == {d["id"] for d in listed if d["subscription_id"] == everything["id"]}
    succeeded = [
        (await stack.api.get(f"/v1/deliveries/{i}")).json()
        for i in await _ids(stack, log, event_type="run.succeeded")
    ]
    assert {d["run_id"] for d in succeeded} == {run["id"], other["id"]}
    assert {d["event_type"] for d in succeeded} == {"run.succeeded"}
    both = await _ids(stack, log, event_type="run.succeeded", run_id=other["id"], status="succeeded")
    assert len(both) == 1 and both[0] in {d["id"] for d in succeeded}
    assert (
        await _ids(stack, f"/v1/subscriptions/{terminal['id']}/deliveries", event_type="run.submitted") == []
    )
    for params in ({"event_type": "run.*"}, {"event_type": "nope"}, {"run_id": "sub_1"}):
        assert (await stack.api.get(log, params=params)).status_code == 422, params
