#!lua
-- Shared by fanout_deliveries.lua, relay_feed.lua and transition.lua (prepended by scripts.py, after
-- DEFAULT_TYPES and EVENT_TEST from service/core/domain.py): the event matcher, a delivery's creation, a feed
-- entry, and whether a client's directory may want an event.

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

-- Whether a subscription of the client (one of the run's, if it names any: `sub_filter`) may want one of
-- `events` ({etype}), by the client's directory (`subs_key`, and `types_key`, which keeps each one's types,
-- never narrower than its own): a subscription with none kept, or with an entry that is no list, may want
-- anything. Reads the directory in two commands whatever its size (at most MAX_SUBSCRIPTIONS_PER_CLIENT),
-- and remembers the answer for the rest of this script's call: a batch's changes of one client ask the
-- same question of a directory that no other command can change meanwhile.
local WANTED = {}
local function may_be_wanted(subs_key, types_key, sub_filter, events)
  local etypes = {}
  for i, ev in ipairs(events) do etypes[i] = ev['etype'] end
  local memo = subs_key .. '|' .. table.concat(sub_filter or {}, ',') .. '|' .. table.concat(etypes, ',')
  if WANTED[memo] ~= nil then return WANTED[memo] end
  local filter, kept, wanted = as_filter(sub_filter), {}, false
  local flat = redis.call('HGETALL', types_key)
  for i = 1, #flat, 2 do kept[flat[i]] = flat[i + 1] end
  for _, sid in ipairs(redis.call('ZRANGE', subs_key, '0', '-1')) do
    if filter == nil or filter[sid] then
      local types = kept[sid]
      if not types or types == '' or types == 'null' then wanted = true; break end
      for _, etype in ipairs(etypes) do
        local ok, hit = pcall(matches, etype, types)
        if hit or not ok then wanted = true; break end
      end
      if wanted then break end
    end
  end
  WANTED[memo] = wanted
  return wanted
end
