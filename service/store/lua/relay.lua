#!lua
-- The relay: fans out every event in a run's outbox, oldest first, as the transitions that emitted them
-- left them there (transition.lua), then empties the outbox. Each event gets its deliveries (one per
-- matching active subscription), its place in the client's feed and its stored body in this one step
-- (_fanout.lua's emit; the transition stored the bodies), so there is never an event in the feed without
-- its deliveries, and a run's events reach each subscription in the order the run emitted them.
-- Idempotent: a second relay of the same outbox finds it empty.
-- KEYS: 1 the run's outbox, 2 the outbox index, 3 run events, 4 the run's deliveries, 5 the client's
--   subscriptions, then the fan-out block (_fanout.lua) from 6, for the events and subscriptions declared.
-- ARGV[1] JSON: run_id, client, events [the event ids declared], subs [the subscriptions declared].
-- An outbox entry is the relay's ops (JSON: now, retention_ms, zr, sub_filter, ttl_ms, events
--   [{id,type,body,feed?,created,vendor?}], n: how many bodies follow), then n packed bodies, which the
--   events name by their position in the entry (the ops are 1).
-- Returns {'ok', deliveries created} | {'stale', [the outbox's event ids] as JSON}: an event or a
-- subscription the relay needs was not declared; nothing was written, the caller declares them and
-- calls again.
local q = cjson.decode(ARGV[1])
local items = redis.call('LRANGE', KEYS[1], 0, -1)
local entries, ids = {}, {}
local i = 1
while i <= #items do
  local ops = cjson.decode(items[i])
  local n = tonumber(ops['n'])
  local entry = {items[i]}
  for j = 1, n do entry[j + 1] = items[i + j] end
  with_bodies(ops['events'], entry)
  for _, ev in ipairs(ops['events']) do table.insert(ids, ev['id']) end
  table.insert(entries, ops)
  i = i + 1 + n
end

local declared = {}
for _, id in ipairs(q['events']) do table.insert(declared, {id = id}) end
local F = fanout_keys(KEYS, 6, declared, q['subs'])
for _, id in ipairs(ids) do
  if not F.evt[id] then return {'stale', cjson.encode(ids)} end
end
local subs, filter = {}, nil
if #entries > 0 then
  filter = as_filter(entries[1]['sub_filter'])
  subs = redis.call('ZRANGE', KEYS[5], 0, -1)
  for _, sid in ipairs(subs) do
    if (filter == nil or filter[sid]) and not F.sub[sid] then return {'stale', cjson.encode(ids)} end
  end
end

local created = 0
for _, ops in ipairs(entries) do
  for _, ev in ipairs(ops['events']) do
    created = created + emit(F, ev, q['run_id'], KEYS[3], KEYS[4], q['client'], subs, filter, ops['zr'],
      tonumber(ops['now']), ops['retention_ms'], true)
  end
  if ops['ttl_ms'] then redis.call('PEXPIRE', KEYS[3], ops['ttl_ms']) end
end
redis.call('DEL', KEYS[1])
redis.call('ZREM', KEYS[2], q['run_id'])
return {'ok', created}
