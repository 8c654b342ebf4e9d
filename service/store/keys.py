"""Every Redis key that hookbridge uses, in one place.

All keys share the prefix ``hb:``. Values:

================================  ======  =========================================================
key                               type    holds
================================  ======  =========================================================
hb:run:{run}                      string  the run as JSON (public fields and ``_``-prefixed internals)
hb:doc:{run}                      string  the submitted document bytes, until the vendor accepted it
hb:result:{run}                   string  the vendor's result as JSON (not kept with zero retention)
hb:run:{run}:events               list    kept run.progress ids, oldest first (the rest: event_ids)
hb:evt:{evt}                      string  the event's body, the exact bytes sent, packed (bodies.py)
hb:evt:{evt}:pending              string  zero retention only: deliveries of the event not yet final
hb:client:{client}:runs           zset    run ids by creation time (listing)
hb:client:{client}:meta:{digest}  zset    run ids by creation time, of the runs whose metadata holds one
                                          pair (digest: sha256 of key NUL value); the metadata filter
hb:run:{run}:deliveries           zset    the run's delivery ids by creation time (written at fan-out)
hb:client:{client}:subs           zset    subscription ids by creation time
hb:client:{client}:feed           stream  the client's events in emission order (GET /v1/events, SSE):
                                          event id, type, run, vendor, and the (packed) body when hb:evt does
                                          not keep it; trimmed to RETENTION_S (MINID) at each append
hb:client:{client}:streams        zset    the client's open event streams and waiting long-polls,
                                          by lease expiry (the per-client cap)
hb:sub:{sub}                      hash    the subscription (lists as JSON strings), health counters
hb:sub:{sub}:deliveries           zset    delivery ids by creation time (the delivery log)
hb:sub:{sub}:inflight             zset    delivery ids being attempted, by lease expiry
hb:sub:{sub}:parked               zset    the subscription's due deliveries held back by its in-flight
                                          limit, by due time; they return to the due set as its
                                          deliveries end (as many as it then has room for)
hb:chain:{sub}:{run}              list    undelivered deliveries of one run to one subscription, in
                                          order; only the head is ever due (ordering per run)
hb:dlv:{dlv}                      hash    one delivery: event, subscription, status, attempts, ...
hb:dlv:{dlv}:attempts             list    every attempt as JSON
hb:due:runs:{vendor}              zset    run ids by the time their next step is due (or lease end)
hb:due:deliveries                 zset    delivery ids by the time their next attempt is due
hb:active:runs                    set     runs not finished (the sweeper walks this, not the history)
hb:active:deliveries              set     deliveries pending
hb:idem:{client}:{sha256(key)}    string  "fingerprint run_id" for Idempotency-Key, with a TTL
hb:budget:{vendor}                string  the vendor budget's theoretical arrival time (GCRA), ms
hb:budget:sub:{sub}               string  the same for a subscription's delivery rate
hb:dlvclient:{client}:inflight    zset    a client's deliveries being attempted, by lease expiry
hb:dlvclient:{client}:parked      zset    a client's due deliveries held back by its in-flight limit,
                                          by due time; one returns to the due set as one ends
hb:pause:{vendor}                 hash    the vendor's pause after a 429: until (ms), streak (429s in a
                                          row), probe (the one request allowed out after it), probe_exp
hb:rate:{name}:{client}           string  a client's API rate limiter (GCRA), e.g. submits, with a TTL
hb:worker:{worker}                string  a worker's heartbeat, with a TTL
================================  ======  =========================================================
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable

PREFIX = "hb:"
DUE_DELIVERIES = f"{PREFIX}due:deliveries"
ACTIVE_RUNS = f"{PREFIX}active:runs"
ACTIVE_DELIVERIES = f"{PREFIX}active:deliveries"
WORKERS = f"{PREFIX}worker:"
# Per-client delivery bookkeeping (client_inflight, client_parked).
DELIVERY_CLIENT = f"{PREFIX}dlvclient:"


def run(run_id: str) -> str:
    return f"{PREFIX}run:{run_id}"


def document(run_id: str) -> str:
    return f"{PREFIX}doc:{run_id}"


def result(run_id: str) -> str:
    return f"{PREFIX}result:{run_id}"


def run_events(run_id: str) -> str:
    return f"{PREFIX}run:{run_id}:events"


def event(event_id: str) -> str:
    return f"{PREFIX}evt:{event_id}"


def event_pending(event_id: str) -> str:
    return f"{PREFIX}evt:{event_id}:pending"


def client_runs(client: str) -> str:
    return f"{PREFIX}client:{client}:runs"


def run_metadata(client: str, key: str, value: str) -> str:
    """The client's runs whose metadata has ``key`` = ``value``: hashed, since both are the tenant's own
    text (any characters, up to MAX_METADATA_VALUE_BYTES)."""
    digest = hashlib.sha256(f"{key}\x00{value}".encode()).hexdigest()[:32]
    return f"{PREFIX}client:{client}:meta:{digest}"


def run_deliveries(run_id: str) -> str:
    return f"{PREFIX}run:{run_id}:deliveries"


def client_subs(client: str) -> str:
    return f"{PREFIX}client:{client}:subs"


def client_feed(client: str) -> str:
    return f"{PREFIX}client:{client}:feed"


def client_streams(client: str) -> str:
    return f"{PREFIX}client:{client}:streams"


def subscription(sub_id: str) -> str:
    return f"{PREFIX}sub:{sub_id}"


def sub_deliveries(sub_id: str) -> str:
    return f"{PREFIX}sub:{sub_id}:deliveries"


def sub_inflight(sub_id: str) -> str:
    return f"{PREFIX}sub:{sub_id}:inflight"


def sub_parked(sub_id: str) -> str:
    return f"{PREFIX}sub:{sub_id}:parked"


def client_inflight(client: str) -> str:
    return f"{DELIVERY_CLIENT}{client}:inflight"


def client_parked(client: str) -> str:
    return f"{DELIVERY_CLIENT}{client}:parked"


def chain(sub_id: str, run_id: str) -> str:
    return f"{PREFIX}chain:{sub_id}:{run_id}"


def delivery(dlv_id: str) -> str:
    return f"{PREFIX}dlv:{dlv_id}"


def delivery_attempts(dlv_id: str) -> str:
    return f"{PREFIX}dlv:{dlv_id}:attempts"


def due_runs(vendor: str) -> str:
    return f"{PREFIX}due:runs:{vendor}"


def idempotency(client: str, key: str) -> str:
    digest = hashlib.sha256(key.encode()).hexdigest()
    return f"{PREFIX}idem:{client}:{digest}"


def vendor_budget(vendor: str) -> str:
    return f"{PREFIX}budget:{vendor}"


def sub_budget(sub_id: str) -> str:
    return f"{PREFIX}budget:sub:{sub_id}"


def client_rate(name: str, client: str) -> str:
    return f"{PREFIX}rate:{name}:{client}"


def worker(worker_id: str) -> str:
    return f"{WORKERS}{worker_id}"


def vendor_pause(vendor: str) -> str:
    return f"{PREFIX}pause:{vendor}"


# The Lua side --------------------------------------------------------------------------------------
#
# The scripts in lua/ never spell a key: scripts.py prepends ``lua_prelude()``, which defines one Lua
# function per builder above (``k_run(id)``, ``k_chain(sub, run)``, ...) and one constant per fixed key
# (``K_DUE_DELIVERIES``, ...), each generated from the Python builder itself, so both sides always agree.

_LUA_BUILDERS: dict[str, Callable[..., str]] = {
    "k_run": run,
    "k_doc": document,
    "k_result": result,
    "k_run_events": run_events,
    "k_event": event,
    "k_event_pending": event_pending,
    "k_client_runs": client_runs,
    "k_client_subs": client_subs,
    "k_run_deliveries": run_deliveries,
    "k_client_feed": client_feed,
    "k_sub": subscription,
    "k_sub_deliveries": sub_deliveries,
    "k_sub_inflight": sub_inflight,
    "k_sub_parked": sub_parked,
    "k_client_inflight": client_inflight,
    "k_client_parked": client_parked,
    "k_chain": chain,
    "k_dlv": delivery,
    "k_dlv_attempts": delivery_attempts,
    "k_due_runs": due_runs,
    "k_sub_budget": sub_budget,
}
_LUA_CONSTANTS = {
    "K_DUE_DELIVERIES": DUE_DELIVERIES,
    "K_ACTIVE_RUNS": ACTIVE_RUNS,
    "K_ACTIVE_DELIVERIES": ACTIVE_DELIVERIES,
}
_MARK = re.compile("\x00([0-9])\x00")


def _lua_string(text: str) -> str:
    if not re.fullmatch(r"[A-Za-z0-9:_.-]*", text):
        raise ValueError(f"key part {text!r} needs escaping in Lua")
    return f"'{text}'"


def _lua_builder(name: str, builder: Callable[..., str]) -> str:
    """``local function k_x(a1, a2) return 'hb:x:' .. a1 .. ':' .. a2 end``, from the builder's output
    for marker arguments."""
    arity = builder.__code__.co_argcount
    template = builder(*(f"\x00{i}\x00" for i in range(1, arity + 1)))
    parts = _MARK.split(template)
    exprs = [f"a{p}" if i % 2 else _lua_string(p) for i, p in enumerate(parts) if i % 2 or p]
    params = ", ".join(f"a{i}" for i in range(1, arity + 1))
    return f"local function {name}({params}) return {' .. '.join(exprs)} end"


def lua_prelude() -> str:
    """The Lua definitions of every key a script uses (see above)."""
    lines = ["-- Generated from service/store/keys.py by lua_prelude(); the scripts spell no key."]
    lines += [f"local {name} = {_lua_string(value)}" for name, value in _LUA_CONSTANTS.items()]
    lines += [_lua_builder(name, builder) for name, builder in _LUA_BUILDERS.items()]
    return "\n".join(lines) + "\n"
