"""Callback URLs as a hostile tenant writes them (issue 10, findings 6, 7 and 11).

- 7: a URL is parsed once, by the parser that sends (yarl, under aiohttp): what registration accepts is
  what is sent, and whatever an attempt raises is a failed attempt in the log, never a lease loop.
- 6: an empty ``CALLBACK_BLOCKED_NETWORKS`` is the default list (``none`` turns it off); the cloud
  metadata addresses are refused whatever the settings; IPv6 forms that embed an IPv4 address are judged
  by the IPv4 rules; a refusal never says what a name resolved to.
- 11: a callback URL's query string and userinfo reach neither a log line nor the delivery log.
"""

from __future__ import annotations

import ipaddress
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from structlog.testing import capture_logs

from service.config import settings as settings_mod
from service.delivery.urlsafety import Policy, UnsafeURL, parse
from service.observability import logs
from service.vendors.registry import load_settings
from tests.conftest import Receiver, StackFactory, base_env, eventually
from tests.hostile.hostile_receivers import serve_raw

METADATA = ("169.254.169.254", "fd00:ec2::254", "100.100.100.200")


async def _ended(stack: Any, sub_id: str) -> dict[str, Any]:
    async def check() -> dict[str, Any] | None:
        rows = (await stack.api.get(f"/v1/subscriptions/{sub_id}/deliveries")).json()["data"]
        return rows[0] if rows and rows[0]["status"] != "pending" else None

    row = await eventually(check, timeout=20, what="the delivery ended (no lease loop)")
    return dict((await stack.api.get(f"/v1/deliveries/{row['id']}")).json())


ODD = [
    "http://\t127.0.0.1:{port}/hooks",
    "http://127.0.0.1:{port}/hooks\n",
    " http://127.0.0.1:{port}/hooks",
    "http://127.0.0.1:{port}/ho oks",
    "http://127.0.0.1:{port}/\u202ehooks",
    "http://0177.0.0.1:{port}/hooks",
    "http://0x7f.0.0.1:{port}/hooks",
    "http://0x7f000001:{port}/hooks",
    "http://2130706433:{port}/hooks",
    "http://127.1:{port}/hooks",
    "http://127.0.0.1.:{port}/hooks",
    "http://\uff11\uff12\uff17.0.0.1:{port}/hooks",
    "http://\u24db\u24de\u24d2\u24d0\u24db\u24d7\u24de\u24e2\u24e3:{port}/hooks",
    "http://b\u00fccher.localhost:{port}/hooks",
    "http://exa\u00admple.com:{port}/hooks",
    "http://user:pw@127.0.0.1:{port}/hooks",
    "http://@127.0.0.1:{port}/hooks",
    "http://127.0.0.1:99999999999/hooks",
    "http://127.0.0.1:0/hooks",
    "http://127.0.0.1:-1/hooks",
    "http://[::ffff:127.0.0.1]:{port}/hooks",
    "http://[fe80::1%25lo]:{port}/hooks",
    "http://localhost%00.example:{port}/hooks",
    "http://127.0.0.1%2f:{port}/hooks",
    "HTTP://127.0.0.1:{port}/hooks",
    "http://127.0.0.1:{port}/hooks#fragment",
    "http://127.0.0.1:{port}/hooks?x=%zz&y=\u00e9",
    "http:127.0.0.1:{port}/hooks",
    "http:/127.0.0.1:{port}/hooks",
    "http://127.0.0.1:{port}\\@example.com/hooks",
]


async def test_every_odd_url_is_refused_or_ends_in_a_recorded_outcome(
    make_stack: StackFactory, receiver: Receiver
) -> None:
    """One stack for every URL of ``ODD``: each is refused with a 422 (never a 500), or registered, and
    then its test event ends, delivered or failed, with its attempts in the log (never a lease loop)."""
    stack = await make_stack(HOOKBRIDGE_RETRY_SCHEDULE="50ms")
    port = receiver.url.split(":")[2].split("/")[0]
    outcomes: dict[str, str] = {}
    for template in ODD:
        url = template.format(port=port)
        created = await stack.api.post("/v1/subscriptions", json={"url": url})
        assert created.status_code in (201, 422), (url, created.text)
        if created.status_code == 422:
            assert created.json()["code"] in ("callback_url_not_allowed", "validation_error"), url
            outcomes[url] = "refused"
            continue
        sub = created.json()
        assert (await stack.api.post(f"/v1/subscriptions/{sub['id']}/test")).status_code == 202
        delivery = await _ended(stack, sub["id"])
        assert delivery["attempt_log"], (url, delivery)
        assert delivery["status"] in ("succeeded", "failed"), (url, delivery)
        assert all(a["status_code"] is not None or a["error"] for a in delivery["attempt_log"])
        outcomes[url] = delivery["status"]
    # The forms that readers disagree about are refused outright, not sent somewhere by a second reading.
    for template in [*ODD[:10], "http://user:pw@127.0.0.1:{port}/hooks", "http://127.0.0.1:0/hooks"]:
        assert outcomes[template.format(port=port)] == "refused", template
    assert outcomes[f"HTTP://127.0.0.1:{port}/hooks"] == "succeeded"


async def test_an_answer_that_is_not_http_is_a_failed_attempt_and_the_token_stays_secret(
    make_stack: StackFactory,
) -> None:
    """aiohttp's error for a broken answer quotes the URL: with the receiver's ``?token=`` in it."""
    token = "tok-9f8e7d6c5b4a"
    async with serve_raw(b"HTTP/1.1 abc garbage\r\n\r\n") as url:
        with capture_logs() as entries:
            stack = await make_stack(HOOKBRIDGE_RETRY_SCHEDULE="50ms")
            sub = (await stack.api.post("/v1/subscriptions", json={"url": f"{url}?token={token}"})).json()
            await stack.api.post(f"/v1/subscriptions/{sub['id']}/test")
            delivery = await _ended(stack, sub["id"])
    assert delivery["status"] == "failed"
    assert len(delivery["attempt_log"]) == 2 and all(a["error"] for a in delivery["attempt_log"])
    assert token not in repr(delivery)
    attempts = [e for e in entries if e.get("event") == "delivery attempt"]
    assert len(attempts) == 2
    assert token not in repr(entries)
    # The subscription itself still shows its owner the URL as registered.
    assert (await stack.api.get(f"/v1/subscriptions/{sub['id']}")).json()["url"].endswith(token)


async def test_a_refused_connection_and_a_redirect_keep_userinfo_and_query_out_of_the_log(
    make_stack: StackFactory, receiver: Receiver
) -> None:
    secret = "q-secret-42a1b"
    receiver.answers = [(302, {"Location": f"https://elsewhere.example/cb?sig={secret}&u=1"})]
    stack = await make_stack(HOOKBRIDGE_RETRY_SCHEDULE="50ms")
    with capture_logs() as entries:
        sub = await stack.subscribe(receiver.url + f"?key={secret}")
        await stack.api.post(f"/v1/subscriptions/{sub['id']}/test")
        delivery = await _ended(stack, sub["id"])
    assert [a["status_code"] for a in delivery["attempt_log"]] == [302, 204]
    assert "not followed" in delivery["attempt_log"][0]["error"]
    assert secret not in repr(delivery) and secret not in repr(entries)


def test_the_log_pipeline_redacts_urls_and_secret_keys_in_every_field() -> None:
    event = {
        "event": "x",
        "error": "Cannot connect to https://bob:hunter2@hooks.example/cb?token=abc#f",
        "nested": {"url": "http://h.example/p?k=v"},
        "exc": ValueError("bad URL http://h.example/?t=zzz"),
        "Authorization": "Bearer sk_live_1",  # a key named like a secret: masked whatever it holds
        "items": ["see https://h.example/x?sig=s1"],
    }
    out = logs._scrub(None, "info", event)
    text = repr(out)
    for leaked in ("hunter2", "token=abc", "k=v", "t=zzz", "sk_live_1", "sig=s1"):
        assert leaked not in text
    assert "https://[redacted]@hooks.example/cb?[redacted]" in text


# Blocked networks (finding 6) ---------------------------------------------------------------------------


def test_an_empty_blocked_list_means_the_default_and_none_turns_it_off(redis_url: str) -> None:
    empty = load_settings(base_env(redis_url, HOOKBRIDGE_CALLBACK_BLOCKED_NETWORKS=""))
    assert ipaddress.ip_network("169.254.0.0/16") in empty.callback_blocked_networks
    assert ipaddress.ip_network("127.0.0.0/8") in empty.callback_blocked_networks
    spaces = load_settings(base_env(redis_url, HOOKBRIDGE_CALLBACK_BLOCKED_NETWORKS=" , "))
    assert spaces.callback_blocked_networks == empty.callback_blocked_networks
    off = load_settings(base_env(redis_url, HOOKBRIDGE_CALLBACK_BLOCKED_NETWORKS="none"))
    assert off.callback_blocked_networks == ()
    assert settings_mod.Settings().callback_blocked_networks == empty.callback_blocked_networks


@pytest.mark.parametrize(
    "address",
    [
        *METADATA,
        "::ffff:169.254.169.254",
        "::169.254.169.254",
        "::ffff:0:169.254.169.254",
        "64:ff9b::169.254.169.254",
        "64:ff9b:1::a9fe:a9fe",
        "2002:a9fe:a9fe::1",
        "::ffff:100.100.100.200",
    ],
)
def test_the_metadata_addresses_are_refused_whatever_the_settings_say(address: str) -> None:
    wide_open = Policy(allowed=(ipaddress.ip_network("0.0.0.0/0"), ipaddress.ip_network("::/0")), blocked=())
    assert not wide_open.address_allowed(address)
    with pytest.raises(UnsafeURL, match="blocked"):
        wide_open.check_syntax(f"http://[{address}]/" if ":" in address else f"http://{address}/")


@pytest.mark.parametrize(
    "address",
    ["::127.0.0.1", "::ffff:0:127.0.0.1", "64:ff9b::127.0.0.1", "2002:7f00:1::", "::ffff:10.0.0.1"],
)
def test_ipv6_forms_that_embed_ipv4_are_judged_by_the_ipv4_rules(address: str) -> None:
    policy = Policy(
        allowed=(),
        blocked=(*settings_mod.Settings().callback_blocked_networks, ipaddress.ip_network("10.0.0.0/8")),
    )
    assert not policy.address_allowed(address)
    assert policy.address_allowed("2001:db8::1") and policy.address_allowed("192.0.2.1")


async def test_metadata_urls_are_refused_at_registration_with_the_list_off(make_stack: StackFactory) -> None:
    stack = await make_stack(
        worker=False, HOOKBRIDGE_CALLBACK_ALLOWED_NETWORKS="", HOOKBRIDGE_CALLBACK_BLOCKED_NETWORKS="none"
    )
    for url in (
        "http://169.254.169.254/latest/meta-data/",
        "http://[fd00:ec2::254]/",
        "http://100.100.100.200/",
    ):
        refused = await stack.api.post("/v1/subscriptions", json={"url": url})
        assert refused.status_code == 422 and refused.json()["code"] == "callback_url_not_allowed", url


async def test_an_empty_blocked_setting_still_blocks_loopback(make_stack: StackFactory) -> None:
    stack = await make_stack(
        worker=False, HOOKBRIDGE_CALLBACK_ALLOWED_NETWORKS="", HOOKBRIDGE_CALLBACK_BLOCKED_NETWORKS=""
    )
    refused = await stack.api.post("/v1/subscriptions", json={"url": "http://127.0.0.1:8080/hooks"})
    assert refused.status_code == 422 and refused.json()["code"] == "callback_url_not_allowed"


async def test_a_refusal_never_says_what_a_name_resolves_to(make_stack: StackFactory) -> None:
    stack = await make_stack(worker=False, HOOKBRIDGE_CALLBACK_ALLOWED_NETWORKS="")
    refused = await stack.api.post("/v1/subscriptions", json={"url": "http://localhost:8080/hooks"})
    assert refused.status_code == 422 and refused.json()["code"] == "callback_url_not_allowed"
    assert "localhost" in refused.json()["detail"]
    for address in ("127.0.0.1", "::1", "127.0.", "0:0:0"):
        assert address not in refused.text


# The parser, fuzzed -------------------------------------------------------------------------------------

_ODD_HOSTS = st.sampled_from(
    [
        "127.0.0.1",
        "0177.0.0.1",
        "0x7f.1",
        "2130706433",
        "127.1",
        "\uff11\uff12\uff17.0.0.1",
        "[::1]",
        "[::ffff:127.0.0.1]",
        "[fe80::1%25eth0]",
        "[64:ff9b::7f00:1]",
        "b\u00fccher.example",
        "xn--bcher-kva.example",
        "xn--",
        "-x.example",
        "a" * 64 + ".example",
        "example.com.",
        "exa\u00admple.com",
        "ex\u3002com",
        "",
        "user:pw@host.example",
        "host.example\t",
        "ho\nst.example",
        "%31%32%37.0.0.1",
    ]
)
_TEXT = st.text(
    alphabet=st.sampled_from(list("abc019./:?#@%[]-_~ \t\n\r\\\x00\u3002\uff10\u00ad\u202e\u200b")),
    max_size=12,
)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    scheme=st.sampled_from(["http", "https", "HTTP", "ftp", "javascript", ""]),
    host=st.one_of(_ODD_HOSTS, _TEXT),
    port=st.one_of(
        st.none(),
        st.sampled_from(["0", "1", "65535", "65536", "99999999999", "-1", "+80", " 80", "\uff18\uff10"]),
    ),
    tail=_TEXT,
)
def test_the_url_parser_refuses_or_returns_what_aiohttp_sends(
    scheme: str, host: str, port: str | None, tail: str
) -> None:
    text = f"{scheme}://{host}" + (f":{port}" if port is not None else "") + "/" + tail
    try:
        url = parse(text)
    except UnsafeURL:
        return  # the only exception a URL may raise: registration answers 422
    assert not any(ch.isspace() or ord(ch) < 32 or ch == "\x7f" for ch in text)
    assert url.scheme in ("http", "https") and url.raw_user is None and url.raw_password is None
    assert 1 <= (url.port or 0) <= 65535
    raw_host = url.raw_host or ""
    assert raw_host.isascii() and raw_host
    if ":" in raw_host:
        ipaddress.IPv6Address(raw_host)
    elif raw_host.replace(".", "").isdigit():
        assert str(ipaddress.IPv4Address(raw_host)) == raw_host  # a dotted quad, nothing octal or short
    # Parsing again what is sent finds the same host and port: one reading, not two.
    again = parse(str(url))
    assert (again.raw_host, again.port) == (url.raw_host, url.port)
