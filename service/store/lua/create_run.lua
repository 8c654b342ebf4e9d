#!lua
-- Accepts a run: the client's submit rate, the run, its document, its listing entries (by creation, and
-- by each metadata pair), its first due step and its idempotency record, all or nothing.
-- KEYS: run, doc, client_runs, due_runs, rate, active_runs[, idem], metadata indexes...
-- ARGV: run_json, doc_bytes ('' when the document is a URL), created_ms, run_id, interval_ms ('': no
--       rate), burst, idem_value, idem_ttl_ms, first metadata key's index in KEYS, metadata index ttl_ms
-- Returns {'created'}, {'exists', idem_value} (a replay: nothing written, the rate untouched) or
-- {'rate_limited', wait_ms} (nothing written).
local first_meta = tonumber(ARGV[9])
local idem = first_meta > 7
if idem then
  local existing = redis.call('GET', KEYS[7])
  if existing then return {'exists', existing} end
end
if ARGV[5] ~= '' then
  local wait = gcra(KEYS[5], tonumber(ARGV[5]), tonumber(ARGV[6]), true)
  if wait > 0 then return {'rate_limited', tostring(wait)} end
end
if idem then redis.call('SET', KEYS[7], ARGV[7], 'PX', ARGV[8]) end
redis.call('SET', KEYS[1], ARGV[1])
if ARGV[2] ~= '' then redis.call('SET', KEYS[2], ARGV[2]) end
redis.call('ZADD', KEYS[3], ARGV[3], ARGV[4])
redis.call('ZADD', KEYS[4], ARGV[3], ARGV[4])
-- Each index outlives its newest run (the longest a run may take, then the retention); entries of
-- runs that are gone are skipped by the listing and dropped by the purge (upkeep.py).
for i = first_meta, #KEYS do
  redis.call('ZADD', KEYS[i], ARGV[3], ARGV[4])
  redis.call('PEXPIRE', KEYS[i], ARGV[10])
end
redis.call('SADD', KEYS[6], ARGV[4])
return {'created'}
