"""Ids that end in another key's suffix, or that are no id at all, as another tenant would send them.

At 9efe3c0 ``/v1/subscriptions/{id}:deliveries`` read a sorted set as a hash (WRONGTYPE), answered 503
"store is unreachable", and so told any tenant whether the id existed. Every odd id is now a plain 404
that looks the same whether or not the id exists, and never touches Redis in a way that can fail.
"""

from __future__ import annotations

from urllib.parse import quote

import pytest

from tests.conftest import Stack, StackFactory


@pytest.fixture
async def api_only(make_stack: StackFactory) -> Stack:
    return await make_stack(worker=False)


SUFFIXES = [":deliveries", ":inflight", ":events", ":attempts", ":pending", "*", "?", "[a]", "%00", "\u00e9"]


async def test_ids_with_key_suffixes_are_404_whether_or_not_they_exist(api_only: Stack, receiver) -> None:
    sub = await api_only.subscribe(receiver.url)
    run = await api_only.submit("nutrient")
    test = await api_only.api.post(f"/v1/subscriptions/{sub['id']}/test")
    assert test.status_code == 202
    deliveries = (await api_only.api.get(f"/v1/subscriptions/{sub['id']}/deliveries")).json()["data"]
    dlv = deliveries[0]["id"]
    missing = {"sub": "sub_" + "0" * 26, "run": "run_" + "0" * 26, "dlv": "dlv_" + "0" * 26}

    bodies: dict[str, set[tuple[int, str]]] = {}
    for client in (api_only.api, api_only.bob):  # the owner and another tenant
        for kind, real in (("sub", sub["id"]), ("run", run["id"]), ("dlv", dlv)):
            for suffix in SUFFIXES:
                for base in (real, missing[kind]):
                    odd = quote(base + suffix, safe=":*[]")  # as sent on the wire
                    paths = {
                        "sub": [f"/v1/subscriptions/{odd}", f"/v1/subscriptions/{odd}/deliveries"],
                        "run": [f"/v1/runs/{odd}", f"/v1/runs/{odd}/result", f"/v1/runs/{odd}/events"],
                        "dlv": [f"/v1/deliveries/{odd}"],
                    }[kind]
                    for path in paths:
                        response = await client.get(path)
                        assert response.status_code == 404, (path, response.status_code, response.text)
                        problem = response.json()
                        assert problem["code"] == "not_found"
                        # The same answer for an id that exists and one that does not (bar the echo).
                        shape = (response.status_code, problem["title"])
                        bodies.setdefault(f"{kind}{suffix}", set()).add(shape)
            for action in ("cancel",):
                response = await client.post(f"/v1/runs/{run['id']}:events/{action}")
                assert response.status_code == 404, response.text
            response = await client.post(f"/v1/deliveries/{dlv}:attempts/retry")
            assert response.status_code == 404, response.text
            response = await client.delete(f"/v1/subscriptions/{sub['id']}:deliveries")
            assert response.status_code == 404, response.text
    assert all(len(shapes) == 1 for shapes in bodies.values()), bodies
    # Nothing was harmed: the subscription is still there for its owner.
    assert (await api_only.api.get(f"/v1/subscriptions/{sub['id']}")).status_code == 200


async def test_subscription_ids_in_a_run_request_are_checked_before_redis(api_only: Stack, receiver) -> None:
    sub = await api_only.subscribe(receiver.url)
    # The test event gives the subscription a delivery log: "sub_X:deliveries" now names a real key.
    assert (await api_only.api.post(f"/v1/subscriptions/{sub['id']}/test")).status_code == 202
    for odd in (f"{sub['id']}:deliveries", f"{sub['id']}:inflight", "sub_x", "sub_" + "0" * 26 + "*"):
        response = await api_only.api.post(
            "/v1/runs",
            json={
                "vendor": "nutrient",
                "document": {"url": "https://example.com/a.pdf"},
                "subscription_ids": [odd],
            },
        )
        assert response.status_code == 422, (odd, response.status_code, response.text)
        assert response.json()["code"] == "validation_error"
