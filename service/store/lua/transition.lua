#!lua
-- One state change of a run, with the events it emits and their deliveries, in one atomic step.
-- KEYS: 1 run, 2 the vendor's due set, 3 active runs, 4 result, 5 document, 6 run events, 7 the run's
--   deliveries, 8 the client's subscriptions; with events, the fan-out block (_fanout.lua) from 9. A
--   change that only rewrites the run and moves or keeps its due score declares KEYS 1-2 alone: 3-8 are
--   touched only for events, a result, the document, due_remove and ttl_ms.
-- ARGV[2] the new run (JSON). ARGV[3] the result to keep (JSON), if ops.result. Then the events' bodies.
-- ARGV[1] JSON: run_id, expect_v, status (the new run's); with KEYS 3-8 also client, now, retention_ms,
--   zr ('0'|'1'); due_score (absent = leave alone), due_remove (bool), result (bool: ARGV[3] is the result), events
--   [{id,type,body,feed?,created}] (body, feed: the positions in ARGV of the packed bodies),
--   sub_filter [sub ids], subs [the subscriptions declared in the fan-out block], del_doc (bool),
--   ttl_ms (set on terminal runs)
-- Returns {'ok', deliveries, previous_status} | {'missing'} | {'conflict', current_doc} | {'stale'}: a
-- subscription the events go to was not declared (created since the caller read the client's list):
-- nothing was written, the caller reads the list again.
-- A rewrite keeps the record's expiry (KEEPTTL): a terminal run told to the vendor, or touched after a
-- transient fault, still expires when retention says; only ttl_ms sets a new one.
local ops = cjson.decode(ARGV[1])
local cur = redis.call('GET', KEYS[1])
if not cur then return {'missing'} end
local run = cjson.decode(cur)
-- '_v': a run written before the record's fields had one name (records.Run.from_json reads it too).
if tonumber(run['version'] or run['_v']) ~= tonumber(ops['expect_v']) then return {'conflict', cur} end
if TERMINAL[run['status']] and run['status'] ~= ops['status'] then
  return {'conflict', cur}
end

local events = with_bodies(ops['events'] or {}, ARGV)
local subs, filter, F = {}, nil, nil
if #events > 0 then
  F = fanout_keys(KEYS, 9, events, ops['subs'] or {})
  filter = as_filter(ops['sub_filter'])
  subs = redis.call('ZRANGE', KEYS[8], 0, -1)
  for _, sid in ipairs(subs) do
    if (filter == nil or filter[sid]) and not F.sub[sid] then return {'stale'} end
  end
end

local run_id, client, now = ops['run_id'], ops['client'], tonumber(ops['now'])
redis.call('SET', KEYS[1], ARGV[2], 'KEEPTTL')

if ops['due_score'] then
  redis.call('ZADD', KEYS[2], ops['due_score'], run_id)
elseif ops['due_remove'] then
  redis.call('ZREM', KEYS[2], run_id)
  redis.call('SREM', KEYS[3], run_id) -- nothing left to do for it
end
if ops['result'] then redis.call('SET', KEYS[4], ARGV[3], 'KEEPTTL') end
if ops['del_doc'] then redis.call('DEL', KEYS[5]) end

local created = 0
for _, ev in ipairs(events) do
  created = created + emit(F, ev, run_id, KEYS[6], KEYS[7], client, subs, filter, ops['zr'], now,
    ops['retention_ms'])
end

if ops['ttl_ms'] then
  redis.call('PEXPIRE', KEYS[1], ops['ttl_ms'])
  redis.call('PEXPIRE', KEYS[6], ops['ttl_ms'])
  if ops['result'] then redis.call('PEXPIRE', KEYS[4], ops['ttl_ms']) end
end
return {'ok', created, run['status']}
