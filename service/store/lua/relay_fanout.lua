#!lua
-- The relay's fan-out, its middle step (Runs.relay): every event of the outbox entries the caller read
-- from the run's outbox, oldest first, gets its deliveries (one per matching active subscription) and its
-- place in the client's feed, in this one step: there is never an event in the feed without its
-- deliveries, and a run's events reach each subscription in the order the run emitted them. It touches
-- no key of the run's: the caller reads the outbox before (a plain LRANGE, or the entry its transition
-- just wrote) and empties it after (relay_done.lua), each in the run's own slot.
-- Idempotent: each entry carries the run's version after its transition (v), and the run's mark holds
-- the highest version fanned out, so an entry at or below it was done before (a relay whose last step
-- failed, or two relays of one outbox at once): nothing is fanned out twice, and its answer is read
-- back from its deliveries (their ids are the event's and the subscription's).
-- KEYS: 1 the client's subscriptions, 2 the run's relay mark, then the fan-out block (_fanout.lua) from
--   3, for the events and subscriptions declared, without the events' bodies.
-- ARGV[1] JSON: run_id, client, mark_ms, events [the event ids declared], subs [the subscriptions
--   declared]. ARGV[2..]: the outbox entries as read: per entry the relay's ops (JSON: v, now,
--   retention_ms, zr, sub_filter, ttl_ms, events [{id,type,body,feed?,created,vendor?}], n: how many
--   bodies follow), then n packed bodies, which the events name by their position in the entry (the
--   ops are 1).
-- Returns {'ok', deliveries created, JSON [per event {dlv: [ids], dropped: bool}], in the entries' order}
-- | {'stale', [the entries' event ids] as JSON}: an event or a subscription the fan-out needs was not
-- declared; nothing was written, the caller declares them and calls again.
local q = cjson.decode(ARGV[1])
local entries, ids = {}, {}
local i = 2
while i <= #ARGV do
  local ops = cjson.decode(ARGV[i])
  local n = tonumber(ops['n'])
  local entry = {ARGV[i]}
  for j = 1, n do entry[j + 1] = ARGV[i + j] end
  with_bodies(ops['events'], entry)
  for _, ev in ipairs(ops['events']) do table.insert(ids, ev['id']) end
  table.insert(entries, ops)
  i = i + 1 + n
end

local declared = {}
for _, id in ipairs(q['events']) do table.insert(declared, {id = id}) end
local F = fanout_keys(KEYS, 3, declared, q['subs'])
for _, id in ipairs(ids) do
  if not F.evt[id] then return {'stale', cjson.encode(ids)} end
end
local subs, filter = {}, nil
if #entries > 0 then
  filter = as_filter(entries[1]['sub_filter'])
  subs = redis.call('ZRANGE', KEYS[1], 0, -1)
  for _, sid in ipairs(subs) do
    if (filter == nil or filter[sid]) and not F.sub[sid] then return {'stale', cjson.encode(ids)} end
  end
end

-- An event fanned out before: its deliveries as they stand (to the subscriptions declared).
local function fanned_before(ev)
  local dids = {}
  for _, sid in ipairs(subs) do
    if (filter == nil or filter[sid]) and redis.call('EXISTS', F.dlv[ev['id'] .. ' ' .. sid]) == 1 then
      table.insert(dids, 'dlv_' .. string.sub(redis.sha1hex(ev['id'] .. ':' .. sid), 1, 26))
    end
  end
  return dids
end

local mark = tonumber(redis.call('GET', KEYS[2]) or '0')
local last = mark
local created, out = 0, {}
for _, ops in ipairs(entries) do
  local v = tonumber(ops['v'] or '')
  local before = v ~= nil and v <= mark
  for _, ev in ipairs(ops['events']) do
    local dids, dropped
    if before then
      dids = fanned_before(ev)
      dropped = #dids == 0 and ev['type'] == 'run.progress'
    else
      local n
      dids, n, dropped = fan_out(F, ev, q['run_id'], q['client'], subs, filter, ops['zr'],
        tonumber(ops['now']), ops['retention_ms'])
      created = created + n
    end
    -- cjson writes an empty table as {}: the reader takes either as no deliveries.
    table.insert(out, cjson.encode({dlv = dids, dropped = dropped}))
  end
  if v and v > last then last = v end
end
if last > mark then redis.call('SET', KEYS[2], last, 'PX', q['mark_ms']) end
return {'ok', created, '[' .. table.concat(out, ',') .. ']'}
