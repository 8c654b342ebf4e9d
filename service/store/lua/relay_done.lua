#!lua
-- The relay's last step (Runs.relay), in the run's own slot: what the fan-out (fanout.py) did for
-- the entries the caller read from the run's outbox is written to the run's keys, and those entries leave
-- the outbox. Per entry: its run.progress events that went somewhere are appended to the run's list of
-- progress, its deliveries to the run's index of deliveries (GET /v1/runs/{id}/deliveries), and the
-- stored bodies of the events it dropped (progress nobody asked for: the feed keeps those) are deleted.
-- The outbox only grows at its tail and only loses whole entries at its head, so when its head is one
-- of the entries read, that one and those read after it are still there, in order: they are done and
-- trimmed; when it is none of them, another relay did them all (this one does nothing). An empty
-- outbox leaves the index.
-- Zero retention: per event with deliveries, their number is added to the event's pending count, which
-- each delivery's end counts down (Deliveries.record_attempt, pending_done.lua); when the deliveries all
-- ended before this step, the count is back at 0 here, and the body goes here.
-- KEYS: 1 the run's outbox, 2 the outbox index, 3 run events, 4 the run's deliveries, then the bodies of
--   the events dropped, then per zero-retention event with deliveries its pending count and its body.
-- ARGV[1] JSON: run_id, retention_ms, entries [{items (the entry's length in the outbox), progress [ids
--   kept], dlv [[id, created_ms]], dropped [their KEYS positions], pending [[count's KEYS position,
--   deliveries]] (the body's is the next), ttl_ms?}] in the outbox's order.
--   ARGV[1 + k]: entry k's first item (its relay ops) as read, compared with the outbox's head.
-- Returns the entries done by this call.
local q = cjson.decode(ARGV[1])
local head = redis.call('LINDEX', KEYS[1], '0')
if not head then
  redis.call('ZREM', KEYS[2], q['run_id']) -- nothing left to relay (or the run's keys are gone)
  return 0
end
local first = nil
for k = 1, #q['entries'] do
  if ARGV[1 + k] == head then first = k; break end
end
if not first then return 0 end
local trim = 0
for k = first, #q['entries'] do
  local e = q['entries'][k]
  trim = trim + tonumber(e['items'])
  if #e['progress'] > 0 then redis.call('RPUSH', KEYS[3], unpack(e['progress'])) end
  if e['ttl_ms'] then redis.call('PEXPIRE', KEYS[3], e['ttl_ms']) end
  for _, d in ipairs(e['dlv']) do redis.call('ZADD', KEYS[4], d[2], d[1]) end
  -- Kept as long as the run is after its last event.
  if #e['dlv'] > 0 then redis.call('PEXPIRE', KEYS[4], q['retention_ms']) end
  for _, at in ipairs(e['dropped']) do redis.call('DEL', KEYS[at]) end
  for _, p in ipairs(e['pending'] or {}) do
    if redis.call('INCRBY', KEYS[p[1]], p[2]) == 0 then
      redis.call('DEL', KEYS[p[1]], KEYS[p[1] + 1])
    else
      redis.call('PEXPIRE', KEYS[p[1]], q['retention_ms'])
    end
  end
end
redis.call('LTRIM', KEYS[1], trim, '-1')
local rest = redis.call('LINDEX', KEYS[1], '0')
if rest then
  redis.call('ZADD', KEYS[2], 'XX', cjson.decode(rest)['now'], q['run_id'])
else
  redis.call('ZREM', KEYS[2], q['run_id'])
end
return #q['entries'] - first + 1
