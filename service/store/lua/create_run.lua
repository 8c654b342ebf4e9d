#!lua
-- Accepts a run, in its own shard, after its listing entries are written (accept_run.lua): its
-- idempotency record (minted into the run's shard: Runs.new_run_id), the run, its document, its first
-- due step and its place among the shard's unfinished runs, all or nothing.
-- KEYS: run, doc, due_runs, active_runs[, idem]
-- ARGV: run_json, doc_bytes ('' when the document is a URL), created_ms, run_id, idem_value, idem_ttl_ms
-- Returns {'created'} or {'exists', idem_value} (a replay: nothing written).
if KEYS[5] then
  local existing = redis.call('GET', KEYS[5])
  if existing then return {'exists', existing} end
  redis.call('SET', KEYS[5], ARGV[5], 'PX', ARGV[6])
end
redis.call('SET', KEYS[1], ARGV[1])
if ARGV[2] ~= '' then redis.call('SET', KEYS[2], ARGV[2]) end
redis.call('ZADD', KEYS[3], ARGV[3], ARGV[4])
redis.call('SADD', KEYS[4], ARGV[4])
return {'created'}
