#!lua
-- A submit's first step, the client's side (its slot): the client's submit rate, and the run's listing
-- entries (by creation, and by each metadata pair), written with the run (create_run.lua, in the run's
-- own shard: after this step when a rate applies, else in the same round trip). An entry whose run was never created (a replay that
-- lost a race, a process that died between the two steps) names nothing: the listing skips it and the
-- purge drops it (upkeep.py).
-- KEYS: client_runs, rate, then the metadata indexes. ARGV: created_ms, run_id, interval_ms ('': no
--   rate), burst, metadata index ttl_ms
-- Returns {'ok'} or {'rate_limited', wait_ms} (nothing written).
if ARGV[3] ~= '' then
  local wait = gcra(KEYS[2], tonumber(ARGV[3]), tonumber(ARGV[4]), true)
  if wait > 0 then return {'rate_limited', tostring(wait)} end
end
redis.call('ZADD', KEYS[1], ARGV[1], ARGV[2])
-- Each index outlives its newest run (the longest a run may take, then the retention); entries of
-- runs that are gone are skipped by the listing and dropped by the purge (upkeep.py).
for i = 3, #KEYS do
  redis.call('ZADD', KEYS[i], ARGV[1], ARGV[2])
  redis.call('PEXPIRE', KEYS[i], ARGV[5])
end
return {'ok'}
