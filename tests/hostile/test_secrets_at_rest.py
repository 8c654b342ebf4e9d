"""Subscription secrets at rest (issue 10, finding 12): sealed with AES-GCM under ``SECRET_KEYS``, keys
that live outside Redis. Someone who reads Redis (a dump, a replica, a backup) finds no signing secret;
keys rotate (the first seals, all open); secrets written before the keys were set keep working and are
sealed on the next write or by ``hookbridge reseal-secrets``; a missing key is a recorded failed attempt
and a 503, never a loop or a 500.
"""

from __future__ import annotations

import base64
from typing import Any

import pytest
from standardwebhooks import Webhook

from service.store import keys
from service.store.secretbox import SecretBox, SecretUnavailable
from tests.conftest import Receiver, StackFactory, eventually, hookbridge_command, sync_store_client

K1 = base64.b64encode(b"1" * 32).decode()
K2 = base64.b64encode(b"2" * 32).decode()


def _dump(redis_url: str) -> bytes:
    """Every value in Redis, as bytes: what a leaked dump would hold (every primary's, on a cluster)."""
    client = sync_store_client(redis_url)
    try:
        out = []
        for key in client.scan_iter(count=1000):
            kind = client.type(key)
            if kind == b"string":
                out.append(client.get(key) or b"")
            elif kind == b"hash":
                out.extend(v for kv in client.hgetall(key).items() for v in kv)
            elif kind == b"list":
                out.extend(client.lrange(key, 0, -1))
            elif kind == b"zset":
                out.extend(m for m, _ in client.zrange(key, 0, -1, withscores=True))
            elif kind == b"set":
                out.extend(client.smembers(key))
        return b"\n".join(out)
    finally:
        client.close()


def _stored(redis_url: str, sub_id: str) -> str:
    client = sync_store_client(redis_url)  # the subscription's shard, on any primary
    try:
        return (client.hget(keys.subscription(sub_id), "secrets") or b"").decode()
    finally:
        client.close()


async def _verified(stack: Any, receiver: Receiver, sub: dict[str, Any], secret: str) -> None:
    before = len(receiver.received)
    assert (await stack.api.post(f"/v1/subscriptions/{sub['id']}/test")).status_code == 202
    await eventually(lambda: _value(len(receiver.received) > before), what="test event")
    got = receiver.received[-1]
    Webhook(secret).verify(got.body, got.headers)


async def test_no_signing_secret_is_readable_in_redis(make_stack: StackFactory, receiver: Receiver) -> None:
    stack = await make_stack(HOOKBRIDGE_SECRET_KEYS=f"k1:{K1}")
    sub = await stack.subscribe(receiver.url)
    rotated = (await stack.api.post(f"/v1/subscriptions/{sub['id']}/rotate-secret")).json()
    await _verified(stack, receiver, sub, rotated["secret"])
    await _verified(stack, receiver, sub, sub["secret"])  # the old one signs during the overlap
    assert (await stack.api.get(f"/v1/subscriptions/{sub['id']}/secret")).json() == {
        "secret": rotated["secret"]
    }
    dump = _dump(stack.redis_url)
    assert sub["id"].encode() in dump  # the dump saw the data
    for secret in (sub["secret"], rotated["secret"]):
        assert secret.encode() not in dump
        assert secret.removeprefix("whsec_").encode() not in dump
    assert b"whsec_" not in dump
    assert _stored(stack.redis_url, sub["id"]).startswith("enc:v1:k1:")


async def test_keys_rotate_and_plain_secrets_are_sealed_on_the_next_write(
    make_stack: StackFactory, receiver: Receiver, redis_url: str
) -> None:
    plain = await make_stack(worker=False)  # no keys: stored as today, plain
    legacy = await plain.subscribe(receiver.url)
    assert _stored(redis_url, legacy["id"]).startswith('[["whsec_')

    one = await make_stack(HOOKBRIDGE_SECRET_KEYS=f"k1:{K1}")
    sealed_k1 = await one.subscribe(receiver.url)
    await _verified(one, receiver, legacy, legacy["secret"])  # plain ones keep working
    patched = await one.api.patch(f"/v1/subscriptions/{legacy['id']}", json={"description": "touched"})
    assert patched.status_code == 200
    assert _stored(redis_url, legacy["id"]).startswith("enc:v1:k1:")  # the next write sealed it
    await _verified(one, receiver, legacy, legacy["secret"])

    # A new key first: k1 still opens what it sealed; new secrets are sealed with k2.
    await _stop_worker(one)
    two = await make_stack(HOOKBRIDGE_SECRET_KEYS=f"k2:{K2},k1:{K1}")
    await _verified(two, receiver, sealed_k1, sealed_k1["secret"])
    sealed_k2 = await two.subscribe(receiver.url)
    assert _stored(redis_url, sealed_k2["id"]).startswith("enc:v1:k2:")
    counts = await two.worker.store.subscriptions.reseal_secrets() if two.worker else {}
    assert counts == {"resealed": 2, "current": 1, "unavailable": 0, "changed_meanwhile": 0}
    assert all(_stored(redis_url, s["id"]).startswith("enc:v1:k2:") for s in (legacy, sealed_k1))

    # k1 dropped: everything still opens.
    await _stop_worker(two)
    only_two = await make_stack(HOOKBRIDGE_SECRET_KEYS=f"k2:{K2}")
    for sub in (legacy, sealed_k1, sealed_k2):
        await _verified(only_two, receiver, sub, sub["secret"])


async def test_a_secret_whose_key_is_gone_is_a_failed_attempt_and_a_503(
    make_stack: StackFactory, receiver: Receiver
) -> None:
    one = await make_stack(worker=False, HOOKBRIDGE_SECRET_KEYS=f"k1:{K1}")
    sub = await one.subscribe(receiver.url)
    other = await make_stack(HOOKBRIDGE_SECRET_KEYS=f"k2:{K2}", HOOKBRIDGE_RETRY_SCHEDULE="50ms")
    secret = await other.api.get(f"/v1/subscriptions/{sub['id']}/secret")
    assert secret.status_code == 503 and secret.json()["code"] == "unavailable"
    assert K1 not in secret.text and "whsec_" not in secret.text
    rotate = await other.api.post(f"/v1/subscriptions/{sub['id']}/rotate-secret")
    assert rotate.status_code == 503
    assert (await other.api.get(f"/v1/subscriptions/{sub['id']}")).status_code == 200
    await other.api.post(f"/v1/subscriptions/{sub['id']}/test")

    async def failed() -> dict[str, Any] | None:
        rows = (await other.api.get(f"/v1/subscriptions/{sub['id']}/deliveries")).json()["data"]
        return rows[0] if rows and rows[0]["status"] == "failed" else None

    row = await eventually(failed, what="the delivery failed for good (no lease loop)")
    log = (await other.api.get(f"/v1/deliveries/{row['id']}")).json()["attempt_log"]
    assert len(log) == 2 and all("secret_unavailable" in a["error"] and "k1" in a["error"] for a in log)
    assert receiver.received == []  # nothing unsigned or wrongly signed went out


def test_a_sealed_value_opens_only_for_its_own_subscription_and_key() -> None:
    box = SecretBox([("k1", b"1" * 32)])
    sealed = box.seal("sub_A", [["whsec_abc", None]])
    assert box.open("sub_A", sealed) == [["whsec_abc", None]]
    with pytest.raises(SecretUnavailable):
        box.open("sub_B", sealed)  # copied onto another subscription
    tampered = sealed[:-4] + ("AAAA" if not sealed.endswith("AAAA") else "BBBB")
    with pytest.raises(SecretUnavailable):
        box.open("sub_A", tampered)
    assert sealed != box.seal("sub_A", [["whsec_abc", None]])  # a fresh nonce each time


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("k1", "keyid:base64key"),
        ("k1:not-base64!", "not valid base64"),
        (f"k1:{base64.b64encode(b'short').decode()}", "16, 24 or 32 bytes"),
        (f"k1:{K1},k1:{K2}", "listed twice"),
        (f"bad id:{K1}", "keyid:base64key"),
    ],
)
def test_bad_secret_keys_stop_the_process_without_echoing_a_key(
    redis_url: str, value: str, message: str
) -> None:
    done = hookbridge_command(redis_url, "reseal-secrets", HOOKBRIDGE_SECRET_KEYS=value)
    assert done.returncode == 2
    assert "HOOKBRIDGE_SECRET_KEYS" in done.stderr and message in done.stderr
    assert K1 not in done.stderr and K2 not in done.stderr


async def _stop_worker(stack: Any) -> None:
    """One worker at a time: each stack here holds other keys."""
    stack.worker.request_stop()
    await eventually(lambda: _value(stack.worker.tasks and all(t.done() for t in stack.worker.tasks)))


async def _value(value: object) -> object:
    return value
