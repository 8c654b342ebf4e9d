-- Shared by transition.lua and emit.lua (prepended by scripts.py, after DEFAULT_TYPES and EVENT_TEST
-- from service/domain.py).
-- Creates one delivery per matching active subscription for one event, in the same atomic step that
-- emits the event: there is never an event without its deliveries.

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
-- waits until the earlier one is delivered or has failed for good.
local function create_delivery(ev, sid, run_id, client, now, retention_ms)
  local did = 'dlv_' .. string.sub(redis.sha1hex(ev['id'] .. ':' .. sid), 1, 26)
  local dkey = k_dlv(did)
  if redis.call('EXISTS', dkey) == 1 then return 0 end
  redis.call('HSET', dkey, DF.id, did, DF.event_id, ev['id'], DF.event_type, ev['type'], DF.subscription_id, sid, DF.run_id, run_id,
    DF.client, client, DF.status, DLV.PENDING, DF.attempts, 0, DF.created_at, now, DF.updated_at, now,
    DF.next_attempt_at, now, DF.chained, 1, DF.counted, 0, DF.series, 0)
  redis.call('ZADD', k_sub_deliveries(sid), now, did)
  if run_id ~= '' then
    -- GET /v1/runs/{id}/deliveries; kept as long as the run is after its last event.
    redis.call('ZADD', k_run_deliveries(run_id), now, did)
    redis.call('PEXPIRE', k_run_deliveries(run_id), retention_ms)
  end
  redis.call('SADD', K_ACTIVE_DELIVERIES, did)
  if redis.call('RPUSH', k_chain(sid, run_id), did) == 1 then
    redis.call('ZADD', K_DUE_DELIVERIES, now, did)
  end
  return 1
end

-- Appends the event to the client's feed (GET /v1/events, the SSE streams), trimmed to the retention
-- window. The body goes into the entry only where k_event does not keep it for as long: an event kept
-- nowhere else, and zero retention (whose body goes once delivered; ev.feed is then the body without
-- the result, which is never kept).
local function append_feed(ev, run_id, client, own_body, retention_ms)
  local fkey = k_client_feed(client)
  local fields = {'e', ev['id'], 't', ev['type']}
  if run_id ~= '' then table.insert(fields, 'r'); table.insert(fields, run_id) end
  if ev['vendor'] then table.insert(fields, 'v'); table.insert(fields, ev['vendor']) end
  if own_body then table.insert(fields, 'b'); table.insert(fields, ev['feed'] or ev['body']) end
  -- Trimmed by Redis's clock, which also makes the entry ids: a worker's clock never trims early.
  local t = redis.call('TIME')
  local cutoff = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) - tonumber(retention_ms)
  redis.call('XADD', fkey, 'MINID', tostring(cutoff), '*', unpack(fields))
  redis.call('PEXPIRE', fkey, retention_ms)
end

-- Emits one event: fans it out, appends it to the client's feed, stores its body (the exact bytes
-- sent) and, for run.progress, appends it to the run's list. A run.progress event that no subscription
-- asked for is kept in the feed only. Returns deliveries created.
local function emit(ev, run_id, client, subs, filter, zr, now, retention_ms)
  local ekey = k_event(ev['id'])
  if redis.call('EXISTS', ekey) == 1 then return 0 end
  local n = 0
  for _, sid in ipairs(subs) do
    if filter == nil or filter[sid] then
      local s = redis.call('HMGET', k_sub(sid), 'disabled', 'event_types')
      if s[1] == '0' and matches(ev['type'], s[2]) then
        n = n + create_delivery(ev, sid, run_id, client, now, retention_ms)
      end
    end
  end
  local dropped = n == 0 and ev['type'] == 'run.progress'
  append_feed(ev, run_id, client, dropped or zr == '1', retention_ms)
  if dropped then return 0 end
  redis.call('SET', ekey, ev['body'], 'PX', retention_ms)
  -- The run's record holds the ids of its other events (records.Run.event_ids): only progress, as many
  -- as the vendor reports, needs a list.
  if run_id ~= '' and ev['type'] == 'run.progress' then
    redis.call('RPUSH', k_run_events(run_id), ev['id'])
  end
  if zr == '1' and n > 0 then
    -- Zero retention: counts the deliveries not yet final; the last one to end drops the body.
    redis.call('SET', k_event_pending(ev['id']), n, 'PX', retention_ms)
  end
  return n
end

local function as_filter(list)
  if list == nil or #list == 0 then return nil end
  local set = {}
  for _, v in ipairs(list) do set[v] = true end
  return set
end
