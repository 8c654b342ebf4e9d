"""Lists page with a cursor, newest first, and filter by status and vendor."""

from __future__ import annotations

from service.core import domain
from tests.conftest import StackFactory


async def test_runs_page_through_with_a_cursor_and_filter(make_stack: StackFactory) -> None:
    stack = await make_stack(worker=False)
    made = [await stack.submit("nutrient" if i % 3 else "cloudsquid", filename=f"l{i}.pdf") for i in range(7)]
    seen: list[str] = []
    cursor = None
    while True:
        params = {"limit": 3, **({"cursor": cursor} if cursor else {})}
        page = (await stack.api.get("/v1/runs", params=params)).json()
        assert len(page["data"]) <= 3
        seen += [r["id"] for r in page["data"]]
        cursor = page["next_cursor"]
        if not cursor:
            break
    assert seen == [r["id"] for r in reversed(made)]
    cloudsquid = (await stack.api.get("/v1/runs", params={"vendor": "cloudsquid"})).json()["data"]
    assert {r["id"] for r in cloudsquid} == {r["id"] for r in made if r["vendor"] == "cloudsquid"}
    assert (await stack.api.get("/v1/runs", params={"status": "succeeded"})).json()["data"] == []
    assert len((await stack.api.get("/v1/runs", params={"status": "queued"})).json()["data"]) == 7


async def test_subscriptions_list_and_patch_and_delete(make_stack: StackFactory) -> None:
    stack = await make_stack(worker=False)
    subs = [await stack.subscribe(f"http://127.0.0.1:9/{i}") for i in range(3)]
    listed = (await stack.api.get("/v1/subscriptions", params={"limit": 2})).json()
    assert [s["id"] for s in listed["data"]] == [subs[2]["id"], subs[1]["id"]] and listed["next_cursor"]
    assert "secret" not in listed["data"][0]
    patched = await stack.api.patch(
        f"/v1/subscriptions/{subs[0]['id']}", json={"event_types": ["run.*"], "description": "all of it"}
    )
    assert patched.status_code == 200 and patched.json()["event_types"] == ["run.*"]
    assert (await stack.bob.get(f"/v1/subscriptions/{subs[0]['id']}")).status_code == 404
    assert (await stack.api.delete(f"/v1/subscriptions/{subs[0]['id']}")).status_code == 204
    assert (await stack.api.get(f"/v1/subscriptions/{subs[0]['id']}")).status_code == 404


async def test_the_purge_drops_metadata_index_entries_of_runs_that_expired(make_stack: StackFactory) -> None:
    from service.store import Store, connect, keys

    stack = await make_stack(worker=False)
    gone = await stack.submit(metadata={"order": "A"})
    kept = await stack.submit(metadata={"order": "A"})
    store = Store(connect(stack.settings), stack.settings)  # the cluster, on one (HB_TEST_CLUSTER=1)
    try:
        await store.redis.delete(keys.run(gone["id"]))  # as its retention would
        index = keys.run_metadata("alice", "order", "A")
        assert await store.redis.zcard(index) == 2
        retention_ms = int(stack.settings.retention_s * 1000)
        await store.upkeep.purge_indexes(domain.now_ms() + retention_ms + 1)
        assert [m.decode() for m in await store.redis.zrange(index, 0, -1)] == [kept["id"]]
    finally:
        await store.close()
    listed = (await stack.api.get("/v1/runs", params={"metadata.order": "A"})).json()["data"]
    assert [r["id"] for r in listed] == [kept["id"]]
