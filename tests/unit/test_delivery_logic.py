"""Signing, the retry schedule and URL safety: pure logic.

Event matching lives in Lua (``matches`` in service/store/lua/_fanout.lua) and is tested there, against
a real Redis: tests/store/test_lua.py::test_the_lua_event_matcher."""

from __future__ import annotations

import random
from datetime import UTC, datetime

import pytest
from standardwebhooks import Webhook

from service.config.settings import DEFAULT_BLOCKED_NETWORKS, parse_networks
from service.core import backoff
from service.core.domain import new_id
from service.delivery import signing
from service.delivery.urlsafety import Policy, UnsafeURL, normalise


def test_signatures_verify_with_the_reference_library_and_list_every_secret() -> None:
    old, new = signing.new_secret(), signing.new_secret()
    body = b'{"type":"run.succeeded"}'
    headers = signing.headers([new, old], "evt_1", 1_700_000_000, body, "hookbridge/test")
    assert headers["webhook-signature"].count("v1,") == 2
    for secret in (old, new):
        expected = Webhook(secret).sign("evt_1", datetime.fromtimestamp(1_700_000_000, UTC), body.decode())
        assert expected in headers["webhook-signature"].split(" ")


def test_schedule_jitters_within_twenty_percent_and_ends() -> None:
    rng = random.Random(1)
    steps = (5.0, 300.0)
    waits = [backoff.delivery_wait(steps, 1, None, rng) for _ in range(200)]
    assert all(w is not None and 4.0 <= w <= 6.0 for w in waits)
    assert backoff.delivery_wait(steps, 3, None, rng) is None


def test_retry_after_is_honoured_within_the_schedule() -> None:
    rng = random.Random(2)
    assert backoff.delivery_wait((1.0, 10.0), 1, 5.0, rng) == 5.0
    wait = backoff.delivery_wait((1.0, 10.0), 1, 999.0, rng)
    assert wait == 10.0  # never later than the longest step
    assert backoff.delivery_wait((1.0, 10.0), 1, 0.0, rng) >= 0.8  # never earlier than the step


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("ftp://example.com/", "http"),
        ("http://127.0.0.1/", "blocked"),
        ("http://[::1]/", "blocked"),
        ("http://[::ffff:127.0.0.1]/", "blocked"),
        ("http://169.254.169.254/latest/meta-data", "blocked"),
        ("http://0.0.0.0/", "blocked"),
        ("http://224.0.0.1/", "blocked"),
        ("http://user:pw@10.0.0.1/", "credentials"),
        ("http:///nohost", "host"),
    ],
)
def test_unsafe_urls_are_refused(url: str, reason: str) -> None:
    policy = Policy((), parse_networks(",".join(DEFAULT_BLOCKED_NETWORKS)))
    with pytest.raises(UnsafeURL, match=reason):
        policy.check_syntax(url)


def test_private_ranges_are_allowed_and_allowed_networks_win() -> None:
    blocked = parse_networks(",".join(DEFAULT_BLOCKED_NETWORKS))
    assert Policy((), blocked).address_allowed("10.1.2.3")
    assert not Policy((), blocked).address_allowed("::ffff:169.254.169.254")
    assert Policy(parse_networks("127.0.0.0/8"), blocked).address_allowed("127.0.0.1")
    assert str(normalise("::ffff:10.0.0.1")) == "10.0.0.1"


def test_ids_sort_by_time_and_are_unique() -> None:
    ids = [new_id("run") for _ in range(1000)]
    assert len(set(ids)) == 1000 and all(i.startswith("run_") and len(i) == 30 for i in ids)
