"""Every Redis key that hookbridge uses, in one place.

All keys share the prefix ``hb:``. Values:

================================  ======  =========================================================
key                               type    holds
================================  ======  =========================================================
hb:run:{run}                      string  the run as JSON (public fields and ``_``-prefixed internals)
hb:doc:{run}                      string  the submitted document bytes, until the vendor accepted it
hb:result:{run}                   string  the vendor's result as JSON (not kept with zero retention)
hb:run:{run}:events               list    the run's event ids, oldest first
hb:evt:{evt}                      string  the event's body, the exact bytes sent (type and time inside)
hb:evt:{evt}:pending              string  zero retention only: deliveries of the event not yet final
hb:client:{client}:runs           zset    run ids by creation time (listing)
hb:client:{client}:subs           zset    subscription ids by creation time
hb:sub:{sub}                      hash    the subscription (lists as JSON strings), health counters
hb:sub:{sub}:deliveries           zset    delivery ids by creation time (the delivery log)
hb:sub:{sub}:inflight             zset    delivery ids being attempted, by lease expiry
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

PREFIX = "hb:"
DUE_DELIVERIES = f"{PREFIX}due:deliveries"
ACTIVE_RUNS = f"{PREFIX}active:runs"
ACTIVE_DELIVERIES = f"{PREFIX}active:deliveries"
WORKERS = f"{PREFIX}worker:"
# Per-client delivery bookkeeping; the Lua scripts build the keys from this prefix (passed in).
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


def client_runs(client: str) -> str:
    return f"{PREFIX}client:{client}:runs"


def client_subs(client: str) -> str:
    return f"{PREFIX}client:{client}:subs"


def subscription(sub_id: str) -> str:
    return f"{PREFIX}sub:{sub_id}"


def sub_deliveries(sub_id: str) -> str:
    return f"{PREFIX}sub:{sub_id}:deliveries"


def sub_inflight(sub_id: str) -> str:
    return f"{PREFIX}sub:{sub_id}:inflight"


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
