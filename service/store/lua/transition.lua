-- One state change of a run, with the events it emits and their deliveries, in one atomic step.
-- KEYS[1] run key. ARGV[2] the new run (JSON). ARGV[3] the result to keep (JSON), if any.
-- ARGV[1] JSON: run_id, client, expect_v, status (the new run's), now, retention_ms, zr ('0'|'1'),
--   due_key, due_score (absent = leave alone), due_remove (bool), events [{id,type,body,created}],
--   sub_filter [sub ids], del_doc (bool), ttl_ms (set on terminal runs)
-- Returns {'ok', deliveries, previous_status} | {'missing'} | {'conflict', current_doc}.
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

local run_id, client, now = ops['run_id'], ops['client'], tonumber(ops['now'])
redis.call('SET', KEYS[1], ARGV[2], 'KEEPTTL')

if ops['due_score'] then
  redis.call('ZADD', ops['due_key'], ops['due_score'], run_id)
elseif ops['due_remove'] then
  redis.call('ZREM', ops['due_key'], run_id)
  redis.call('SREM', K_ACTIVE_RUNS, run_id) -- nothing left to do for it
end
if ARGV[3] then redis.call('SET', k_result(run_id), ARGV[3], 'KEEPTTL') end
if ops['del_doc'] then redis.call('DEL', k_doc(run_id)) end

local created = 0
if ops['events'] and #ops['events'] > 0 then
  local subs = redis.call('ZRANGE', k_client_subs(client), 0, -1)
  local filter = as_filter(ops['sub_filter'])
  for _, ev in ipairs(ops['events']) do
    created = created + emit(ev, run_id, client, subs, filter, ops['zr'], now, ops['retention_ms'])
  end
end

if ops['ttl_ms'] then
  redis.call('PEXPIRE', KEYS[1], ops['ttl_ms'])
  redis.call('PEXPIRE', k_run_events(run_id), ops['ttl_ms'])
  if ARGV[3] then redis.call('PEXPIRE', k_result(run_id), ops['ttl_ms']) end
end
return {'ok', created, run['status']}
