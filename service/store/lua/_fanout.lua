#!lua
-- Shared by relay_fanout.lua and emit.lua (prepended by scripts.py, after DEFAULT_TYPES and EVENT_TEST
-- from service/core/domain.py).
-- Creates one delivery per matching active subscription for one event, in the same atomic step that
-- fans the event out: there is never an event in the feed without its deliveries.
--
-- Every key is declared (service/store/fanout.py builds them in this order): a fan-out block of KEYS,
-- from `at`: the client's feed, the active deliveries, the due deliveries; then per event (in the order
-- of the events) its pending count (zero retention); then per subscription named (in the order of
-- `subs`) its hash, its delivery log and its chain for this run; then per event, per subscription, the
-- delivery. The events' bodies are not among them: they live in their runs' shards, stored by the
-- transition that emits them (emit.lua's caller stores its own first).
-- Subscriptions are only ever ones the caller read and declared: a script never builds a key.

local function fanout_keys(K, at, events, subs)
  local F = {feed = K[at], active = K[at + 1], due = K[at + 2], evt = {}, sub = {}, dlv = {}}
  at = at + 3
  for _, ev in ipairs(events) do
    F.evt[ev['id']] = {pending = K[at]}
    at = at + 1
  end
  for _, sid in ipairs(subs) do
    F.sub[sid] = {hash = K[at], log = K[at + 1], chain = K[at + 2]}
    at = at + 3
  end
  for _, ev in ipairs(events) do
    for _, sid in ipairs(subs) do
      F.dlv[ev['id'] .. ' ' .. sid] = K[at]
      at = at + 1
    end
  end
  return F
end

-- The one event matcher: no list means DEFAULT_TYPES; 'run.*' matches every run event; the test event
-- goes only to the subscription it was sent to (emit.lua's filter), whatever that one asked for.
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
-- waits until the earlier one is delivered or has failed for good. Returns the delivery's id and whether
-- this call created it (false: it exists already). (The run's index of deliveries is written in the
-- run's own slot by the relay's last step, relay_done.lua, from the ids the fan-out returns.)
local function create_delivery(F, ev, sid, run_id, client, now)
  local did = 'dlv_' .. string.sub(redis.sha1hex(ev['id'] .. ':' .. sid), 1, 26)
  local dkey, s = F.dlv[ev['id'] .. ' ' .. sid], F.sub[sid]
  if redis.call('EXISTS', dkey) == 1 then return did, false end
  redis.call('HSET', dkey, DF.id, did, DF.event_id, ev['id'], DF.event_type, ev['type'], DF.subscription_id, sid, DF.run_id, run_id,
    DF.client, client, DF.status, DLV.PENDING, DF.attempts, 0, DF.created_at, now, DF.updated_at, now,
    DF.next_attempt_at, now, DF.chained, 1, DF.counted, 0, DF.series, 0)
  redis.call('ZADD', s.log, now, did)
  redis.call('SADD', F.active, did)
  if redis.call('RPUSH', s.chain, did) == 1 then
    redis.call('ZADD', F.due, now, did)
  end
  return did, true
end

-- Appends the event to the client's feed (GET /v1/events, the SSE streams), trimmed to the retention
-- window. The body goes into the entry only where the event's key does not keep it for as long: an event
-- kept nowhere else, and zero retention (whose body goes once delivered; ev.feed is then the body without
-- the result, which is never kept). Otherwise the entry carries the body's size ('n'), so that a reader
-- bounds its page's bytes before it reads the bodies.
local function append_feed(F, ev, run_id, own_body, retention_ms)
  local fields = {'e', ev['id'], 't', ev['type']}
  if run_id ~= '' then table.insert(fields, 'r'); table.insert(fields, run_id) end
  if ev['vendor'] then table.insert(fields, 'v'); table.insert(fields, ev['vendor']) end
  if own_body then
    table.insert(fields, 'b'); table.insert(fields, ev['feed'] or ev['body'])
  else
    table.insert(fields, 'n'); table.insert(fields, tostring(#ev['body']))
  end
  -- Trimmed by Redis's clock, which also makes the entry ids: a worker's clock never trims early.
  local t = redis.call('TIME')
  local cutoff = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) - tonumber(retention_ms)
  redis.call('XADD', F.feed, 'MINID', tostring(cutoff), '*', unpack(fields))
  redis.call('PEXPIRE', F.feed, retention_ms)
end

-- Fans one event out to `subs` (the client's subscriptions as they are now, each declared) and appends it
-- to the client's feed. A run.progress event that no subscription asked for is kept in the feed only
-- (`dropped`: the caller drops its stored body). Returns the event's deliveries' ids (those that existed
-- already too: an event fanned out twice creates nothing twice), how many this call created, and
-- `dropped`.
local function fan_out(F, ev, run_id, client, subs, filter, zr, now, retention_ms)
  local dids, created = {}, 0
  for _, sid in ipairs(subs) do
    if filter == nil or filter[sid] then
      local s = redis.call('HMGET', F.sub[sid].hash, 'disabled', 'event_types')
      if s[1] == '0' and matches(ev['type'], s[2]) then
        local did, new = create_delivery(F, ev, sid, run_id, client, now)
        table.insert(dids, did)
        if new then created = created + 1 end
      end
    end
  end
  local dropped = #dids == 0 and ev['type'] == 'run.progress'
  append_feed(F, ev, run_id, dropped or zr == '1', retention_ms)
  if zr == '1' and created > 0 then
    -- Zero retention: counts the deliveries not yet final; the last one to end drops the body.
    redis.call('SET', F.evt[ev['id']].pending, created, 'PX', retention_ms)
  end
  return dids, created, dropped
end

-- The events' bodies (and zero retention's feed bodies) travel as arguments of their own, the packed bytes
-- (service/store/bodies.py: binary, so never inside the JSON): each event names their positions in `argv`.
local function with_bodies(events, argv)
  for _, ev in ipairs(events) do
    ev['body'] = argv[ev['body']]
    if ev['feed'] then ev['feed'] = argv[ev['feed']] end
  end
  return events
end

local function as_filter(list)
  if list == nil or #list == 0 then return nil end
  local set = {}
  for _, v in ipairs(list) do set[v] = true end
  return set
end
