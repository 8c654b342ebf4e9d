"""What `HB_TEST_CLUSTER=1` claims (tests/conftest.py): the stacks of the tests run with it are on the
session's Redis Cluster, not on a single server. Without it, the same check holds the other way."""

from __future__ import annotations

from tests.conftest import ON_CLUSTER, Stack


async def test_the_stack_runs_on_the_redis_the_run_says(stack: Stack) -> None:
    assert bool(stack.settings.redis_cluster_nodes) is ON_CLUSTER
    created = await stack.subscribe("http://127.0.0.1:9/hooks")
    assert (await stack.api.get(f"/v1/subscriptions/{created['id']}")).status_code == 200
