#!lua
-- Shared by fanout_deliveries.lua and relay_feed.lua (prepended by scripts.py, after DEFAULT_TYPES and
-- EVENT_TEST from service/core/domain.py): the event matcher, a delivery's creation, a feed entry.

-- The one event matcher: no list means DEFAULT_TYPES; 'run.*' matches every run event; the test event
-- goes only to the subscription it was sent to (the caller names that one alone), whatever it asked for.
local function matches(etype, types_json)
  if etype == EVENT_TEST then return true end
  local types = DEFAULT_TYPES
  if types_json and types_json ~= '' and types_json ~= 'null' then
    types = cjson.decode(types_json)
  end
  for _, t in ipairs(types) do
    if t == etype then return true end
    if t == 'run.*' and string.sub(etype, 1, 4) == 'run.' then return true end
  end
  return false
end

-- Deliveries of one run to one subscription form a chain; only its head is ever due, so a later event
-- waits until the earlier one is delivered or has failed for good. `did` is minted by the caller
-- (service/store/fanout.py: the same for the same event and subscription, in the subscription's shard),
-- so a fan-out done twice creates nothing twice. Returns whether this call created it. A zero-retention
-- delivery is `counted` ('0'): its end counts down the event's pending deliveries (delivery_result.lua).
local function create_delivery(S, dkey, did, ev, sid, run_id, client, now, zr)
  if redis.call('EXISTS', dkey) == 1 then return false end
  redis.call('HSET', dkey, DF.id, did, DF.event_id, ev['id'], DF.event_type, ev['type'], DF.subscription_id, sid, DF.run_id, run_id,
    DF.client, client, DF.status, DLV.PENDING, DF.attempts, '0', DF.created_at, now, DF.updated_at, now,
    DF.next_attempt_at, now, DF.chained, '1', DF.series, '0')
  if zr then redis.call('HSET', dkey, DF.counted, '0') end
  redis.call('ZADD', S.log, now, did)
  redis.call('SADD', S.active, did)
  if redis.call('RPUSH', S.chain, did) == 1 then
    redis.call('ZADD', S.due, now, did)
  end
  return true
end

-- Appends the event to the client's feed (GET /v1/events, the SSE streams), trimmed to the retention
-- window, as service/store/feedform.py says an entry is stored: always the same five fields, e (the event
-- id, stored: `event_id`), t (the type's code), r (the run id, stored, or ''), v (the vendor, or ''), b.
-- `body`: the entry's own body where the event's key does not keep it for as long (an event kept nowhere
-- else, and zero retention's), else nil and b holds `size`, the body's size in digits, so that a reader
-- bounds its page's bytes before it reads the bodies. The caller gives the ids in their stored forms (bytes:
-- arguments of their own) and the type's code.
local function append_feed(feed, event_id, ev, run_id, body, size, retention_ms)
  -- Trimmed by Redis's clock, which also makes the entry ids: a worker's clock never trims early.
  local t = redis.call('TIME')
  local cutoff = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) - tonumber(retention_ms)
  redis.call('XADD', feed, 'MINID', string.format('%d', cutoff), '*', 'e', event_id, 't', ev['type'],
    'r', run_id, 'v', ev['vendor'] or '', 'b', body or tostring(size))
  redis.call('PEXPIRE', feed, retention_ms)
end

local function as_filter(list)
  if list == nil or #list == 0 then return nil end
  local set = {}
  for _, v in ipairs(list) do set[v] = true end
  return set
end
