"""Every Redis key that hookbridge uses, in one place.

Every key starts with ``hb:`` and a hash tag (docs/shards.md): a run's keys, and those of the events
it emits and of an idempotency record, have their shard's (``hb:{<tag>}:``, ``of(id)``: the id alone
says which), and so do a subscription's and its deliveries' (a delivery's id is minted in its
subscription's shard), and a client's (its listing, feed, directory, rates: the client's name says
which); the per-shard indexes of runs and deliveries theirs; a vendor's budget and pause the vendor's own
(``hb:{v:<vendor>}:``); the workers' heartbeats the store's one tag (``hb:{hb}:``, ``PREFIX``). Below,
``hb:<s>:`` is a shard's prefix and ``hb:`` the store's. The scripts in lua/ never build one: every key a
script touches is passed in its ``KEYS``, built here. Values:

====================================  ======  =========================================================
key                                   type    holds
====================================  ======  =========================================================
hb:<s>:run:{run}                      string  the run as JSON (``Run.to_json``: public fields and internals,
                                              short names, not its id: the key's; once finished, all
                                              but its head deflated: ``core/compact.py``)
hb:<s>:doc:{run}                      string  the submitted document bytes, until the vendor accepted it
hb:<s>:result:{run}                   string  the vendor's result as JSON (not kept with zero retention)
hb:<s>:run:{run}:events               list    kept run.progress ids, oldest first (the rest: event_ids)
hb:<s>:run:{run}:outbox               list    the run's events not yet fanned out, in emission order: per
                                              transition its relay ops (JSON) then the events' packed bodies;
                                              written by the transition, emptied by the relay's last step
                                              (the fan-out, then relay_done.lua)
hb:<s>:outbox                         zset    the shard's runs whose outbox holds events, by the time of the
                                              oldest: the sweeper relays what a crash left behind
hb:<s>:evt:{evt}                      string  the event's body, the exact bytes sent, packed (bodies.py); in
                                              its run's shard (its id is minted there: new_id_beside)
hb:<s>:evt:{evt}:pending              string  zero retention only: deliveries of the event not yet final
                                              (beside its body; may dip below 0 until the relay's last step)
hb:<s>:client:{client}:runs           zset    run ids by creation time (listing)
hb:<s>:client:{client}:relayed:{run}  string  the relay's mark: the run's version whose outbox entry was the
                                              last fanned out, kept RELAY_MARK_MS (a relay whose last step
                                              failed is finished without a second feed entry)
hb:<s>:client:{client}:meta:{digest}  zset    run ids by creation time, of the runs whose metadata holds one
                                              pair (digest: sha256 of key NUL value); the metadata filter
hb:<s>:run:{run}:deliveries           zset    the run's delivery ids by creation time (written at fan-out)
hb:<s>:client:{client}:subs           zset    subscription ids by creation time
hb:<s>:client:{client}:feed           stream  the client's events in emission order (GET /v1/events, SSE):
                                              event id, type, run, vendor, and the (packed) body when
                                              hb:evt does not keep it, else its size (short forms:
                                              feedform.py); trimmed to RETENTION_S (MINID) at each append
hb:<s>:client:{client}:streams        zset    the client's open event streams and waiting long-polls,
                                              by lease expiry (the per-client cap)
hb:<s>:sub:{sub}                      hash    the subscription (lists as JSON strings), health counters; in
                                              its shard (its id is minted there: spread_shard), as are its
                                              other keys, its chains and its deliveries'
hb:<s>:sub:{sub}:deliveries           zset    delivery ids by creation time (the delivery log)
hb:<s>:sub:{sub}:inflight             zset    delivery ids being attempted, by lease expiry
hb:<s>:sub:{sub}:parked               zset    the subscription's due deliveries held back by its in-flight
                                              limit, by due time; they return to the due set as its
                                              deliveries end (as many as it then has room for)
hb:<s>:chain:{sub}:{run}              list    undelivered deliveries of one run to one subscription, in
                                              order; only the head is ever due (ordering per run)
hb:<s>:dlv:{dlv}                      hash    one delivery: event, subscription, status, attempts, ...; in
                                              its subscription's shard (fanout.delivery_id_in_shard)
hb:<s>:dlv:{dlv}:attempts             list    every attempt as JSON
hb:<s>:due:runs:{vendor}              zset    the shard's run ids by the time their next step is due (or
                                              lease end); a worker reads those it believes due (due.py)
hb:<s>:due:deliveries                 zset    the shard's delivery ids by the time their next attempt is due
hb:<s>:active:runs                    set     the shard's runs not finished (the sweeper walks these)
hb:<s>:active:deliveries              set     the shard's deliveries pending
hb:<s>:idem:{client}:{sha}            string  "fingerprint run_id" for Idempotency-Key (sha: sha256 of the
                                              key), with a TTL, in the shard of ``{client}:{sha}``: the run's
hb:{v:<vendor>}:budget                string  the vendor budget's theoretical arrival time (GCRA), ms; under
                                              the vendor's own tag (``vendor_prefix``), as is its pause
hb:<s>:budget:sub:{sub}               string  the same for a subscription's delivery rate
hb:<s>:dlvclient:{client}:inflight    zset    a client's deliveries in the shard being attempted, by lease
hb:<s>:dlvclient:{client}:parked      zset    a client's due deliveries in the shard held back by its limit
                                              (or a worker's room for it), by due time; one returns to the
                                              due set as one of the client's ends
hb:{v:<vendor>}:pause                 hash    the vendor's pause after a 429: until (ms), streak (429s in a
                                              row), probe (the one request allowed out after it), probe_exp
hb:<s>:rate:{name}:{client}           string  a client's API rate limiter (GCRA), e.g. submits, with a TTL
hb:worker:{worker}                    string  a worker's heartbeat, with a TTL
====================================  ======  =========================================================
"""

from __future__ import annotations

import hashlib
import itertools
import string
from collections.abc import Callable

from redis.crc import REDIS_CLUSTER_HASH_SLOTS, key_slot

from service.core import domain

# Every key starts with ``hb:``. The store's own tag (``{hb}``) holds what belongs to no run, subscription,
# client or vendor: the workers' heartbeats (docs/shards.md).
ROOT = "hb:"
TAG = "hb"
PREFIX = f"{ROOT}{{{TAG}}}:"
WORKERS = f"{PREFIX}worker:"
# A pattern that matches a key of every shard (``SCAN MATCH``: braces are not special in a glob).
ANY_SHARD = f"{ROOT}{{*}}:"
# Every subscription's delivery log, and every client's listing of runs (by creation, by metadata pair), in
# every shard (the purge walks them).
DELIVERY_LOGS = f"{ANY_SHARD}sub:*:deliveries"
RUN_LISTINGS = f"{ANY_SHARD}client:*:runs"
METADATA_LISTINGS = f"{ANY_SHARD}client:*:meta:*"


def of(identifier: str) -> str:
    """The prefix of the keys of what ``identifier`` names: its shard's (a run's, an event's). A run's step
    names a dozen keys this way, so the prefix is looked up, not formatted (~0.4 us a key where ~0.7)."""
    return _PREFIXES[shard_of(identifier)]


def run(run_id: str) -> str:
    return f"{of(run_id)}run:{run_id}"


def document(run_id: str) -> str:
    return f"{of(run_id)}doc:{run_id}"


def result(run_id: str) -> str:
    return f"{of(run_id)}result:{run_id}"


def run_events(run_id: str) -> str:
    return f"{of(run_id)}run:{run_id}:events"


def run_outbox(run_id: str) -> str:
    return f"{of(run_id)}run:{run_id}:outbox"


def event(event_id: str) -> str:
    """An event's body, in the event's shard: its run's (``domain.new_id_beside``)."""
    return f"{of(event_id)}evt:{event_id}"


def event_pending(event_id: str) -> str:
    """Zero retention: the event's deliveries not yet final, beside its body (what drops the body)."""
    return f"{of(event_id)}evt:{event_id}:pending"


def client_runs(client: str) -> str:
    return f"{of(client)}client:{client}:runs"


def relayed(client: str, run_id: str) -> str:
    """The relay's mark of how far the run's outbox was fanned out: with the client's feed, which it
    keeps free of repeats."""
    return f"{of(client)}client:{client}:relayed:{run_id}"


def run_metadata(client: str, key: str, value: str) -> str:
    """The client's runs whose metadata has ``key`` = ``value``: hashed, since both are the tenant's own
    text (any characters, up to MAX_METADATA_VALUE_BYTES)."""
    digest = hashlib.sha256(f"{key}\x00{value}".encode()).hexdigest()[:32]
    return f"{of(client)}client:{client}:meta:{digest}"


def run_deliveries(run_id: str) -> str:
    return f"{of(run_id)}run:{run_id}:deliveries"


def client_subs(client: str) -> str:
    return f"{of(client)}client:{client}:subs"


def client_sub_types(client: str) -> str:
    """Per subscription in the client's directory, every event type it has asked for since it was created
    (a JSON list): what the relay reads to skip a fan-out that no subscription could want
    (``fanout.may_want``). Never narrower than a subscription's own ``event_types``; one it lacks wants
    every event."""
    return f"{of(client)}client:{client}:subtypes"


def client_feed(client: str) -> str:
    return f"{of(client)}client:{client}:feed"


def client_streams(client: str) -> str:
    return f"{of(client)}client:{client}:streams"


def subscription(sub_id: str) -> str:
    """A subscription's hash, in its shard (its id is minted there: ``Subscriptions.new_subscription_id``),
    with everything its deliveries' claim and result change: its log, in-flight, parked, rate budget, its
    chains and its deliveries."""
    return f"{of(sub_id)}sub:{sub_id}"


def sub_deliveries(sub_id: str) -> str:
    return f"{of(sub_id)}sub:{sub_id}:deliveries"


def sub_inflight(sub_id: str) -> str:
    return f"{of(sub_id)}sub:{sub_id}:inflight"


def sub_parked(sub_id: str) -> str:
    return f"{of(sub_id)}sub:{sub_id}:parked"


def client_inflight(client: str, shard: int) -> str:
    """A client's deliveries being attempted in ``shard`` (its subscriptions' there)."""
    return f"{shard_prefix(shard)}dlvclient:{client}:inflight"


def client_parked(client: str, shard: int) -> str:
    return f"{shard_prefix(shard)}dlvclient:{client}:parked"


def chain(sub_id: str, run_id: str) -> str:
    return f"{of(sub_id)}chain:{sub_id}:{run_id}"


def delivery(dlv_id: str) -> str:
    """A delivery's hash, in its subscription's shard (its id is minted there:
    ``fanout.delivery_id_in_shard``)."""
    return f"{of(dlv_id)}dlv:{dlv_id}"


def delivery_attempts(dlv_id: str) -> str:
    return f"{of(dlv_id)}dlv:{dlv_id}:attempts"


def due_deliveries(shard: int) -> str:
    """The shard's delivery ids by the time their next attempt is due (or lease end)."""
    return f"{shard_prefix(shard)}due:deliveries"


def active_deliveries(shard: int) -> str:
    return f"{shard_prefix(shard)}active:deliveries"


def due_runs(vendor: str, shard: int) -> str:
    """The due set of ``vendor``'s runs in ``shard``: a run's is ``due_runs(vendor, shard_of(run))``."""
    return f"{shard_prefix(shard)}due:runs:{vendor}"


def active_runs(shard: int) -> str:
    return f"{shard_prefix(shard)}active:runs"


def outbox(shard: int) -> str:
    """The runs of ``shard`` whose outbox holds events, by the time of the oldest."""
    return f"{shard_prefix(shard)}outbox"


def idempotency_anchor(client: str, key: str) -> str:
    """What places a client's ``Idempotency-Key`` in a shard: the run it creates is minted into the same
    (``Runs.new_run_id``), so the record and the run are written in one step."""
    return f"{client}:{hashlib.sha256(key.encode()).hexdigest()}"


def idempotency(client: str, key: str) -> str:
    anchor = idempotency_anchor(client, key)
    return f"{of(anchor)}idem:{anchor}"


def vendor_prefix(vendor: str) -> str:
    """``hb:{v:<vendor>}:``: a vendor's own hash tag. Its budget and pause are global by nature (the
    vendor's limit holds for every run of every shard), so they sit apart from the run shards, each
    vendor's in a slot of its own (a budget group's name, ``<vendor>.<group>``, is a tag of its own too):
    on a cluster, the vendors' budgets spread over the primaries instead of adding to one shard's load."""
    return f"{ROOT}{{v:{vendor}}}:"


def vendor_budget(vendor: str) -> str:
    return f"{vendor_prefix(vendor)}budget"


def sub_budget(sub_id: str) -> str:
    return f"{of(sub_id)}budget:sub:{sub_id}"


def client_rate(name: str, client: str) -> str:
    return f"{of(client)}rate:{name}:{client}"


def worker(worker_id: str) -> str:
    return f"{WORKERS}{worker_id}"


def vendor_pause(vendor: str) -> str:
    return f"{vendor_prefix(vendor)}pause"


# Virtual shards (issue 26, ../shared/REDIS-CLUSTER.md §4) ----------------------------------------------
#
# A fixed number of shards, each a hash tag: the keys of one shard share a Redis Cluster slot, so a
# script over them is one slot, and whole shards move between primaries when slots do. The count never
# changes (a run's or a subscription's shard is a function of its id alone); 16 spreads evenly over up to
# 16 primaries, one tag in each 1024-slot sixteenth of the slot space, so the even split a cluster makes
# (``redis-cli --cluster create``, or ``CLUSTER ADDSLOTSRANGE`` in equal ranges) gives each primary
# 16 / N shards, give or take one: 6/5/5 on 3 primaries. On a single node (or Sentinel) the same 16
# shards live on the one server: one layout, no second code path.

SHARDS = domain.SHARDS
shard_of = domain.shard_of  # CRC-32 of the id mod SHARDS: a run by its id, a subscription, a client
_ALPHABET = string.ascii_lowercase + string.digits


def _suffix(n: int) -> str:
    """ "", "a", ..., "9", "aa", "ba", ...: the n-th short suffix (base 36, least significant first)."""
    out = ""
    while n:
        n, digit = divmod(n - 1, len(_ALPHABET))
        out += _ALPHABET[digit]
    return out


def balanced_tags(count: int = SHARDS) -> tuple[str, ...]:
    """One short tag per shard whose slot lies in the middle half of the shard's own 1/``count`` of the
    slot space (``hb<NN><suffix>``, the first suffix that lands there): deterministic, computed once, and
    never at a range's edge, so that a split of the slots into equal ranges never puts two shards' tags
    on the wrong side of a boundary by a few slots."""
    width = REDIS_CLUSTER_HASH_SLOTS // count
    tags = []
    for shard in range(count):
        low, high = shard * width + width // 4, shard * width + 3 * width // 4
        for n in itertools.count():
            tag = f"hb{shard:02d}{_suffix(n)}"
            if low <= key_slot(tag.encode()) < high:
                tags.append(tag)
                break
    return tuple(tags)


TAGS = balanced_tags()


def shard_prefix(shard: int) -> str:
    """``hb:{<tag>}:``, the prefix of every key of ``shard``."""
    return _PREFIXES[shard]


_PREFIXES = tuple(f"{ROOT}{{{tag}}}:" for tag in TAGS)


def in_shard(mint: Callable[[int], str], shard: int) -> str:
    """The first of ``mint(0)``, ``mint(1)``, ... whose shard is ``shard``: an id that stays a function of
    what ``mint`` hashes (deterministic: minting twice gives the same id) and lives in a chosen shard (a
    delivery in its subscription's). About SHARDS tries on average."""
    return next(minted for n in itertools.count() if shard_of(minted := mint(n)) == shard)


# The step between a client's consecutive subscriptions' shards: odd, so that 16 of them fill the 16
# shards, and not 1, so that consecutive ones do not sit side by side in one primary's range of slots (a
# cluster splits the slots into equal ranges, one per primary): on N primaries (2 to 6), any N
# consecutive subscriptions of a client put at most 2 on one primary (offsets 0, 11, 6, 1, 12, 7, ...:
# tests/store/test_shards.py).
SPREAD_STEP = 11


def spread_shard(client: str, count: int) -> int:
    """The shard for a client's ``count``-th subscription (0-based): from the client's own shard, a
    ``SPREAD_STEP`` at a time, so that a handful of subscriptions, and their deliveries, land on as many
    shards and primaries, not on one."""
    return (shard_of(client) + count * SPREAD_STEP) % SHARDS
