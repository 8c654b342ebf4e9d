#!lua
-- Up to n consecutive slots of a vendor's request budget (GCRA, budget.lua) for one claim of runs, in
-- one call on the vendor's own keys, its budget and its pause after a 429: the claim takes its runs from
-- their shard's due set, so neither is in the claim's script (both are global: one of each per vendor).
-- KEYS: budget, pause (pause.lua). ARGV[1] = op.
-- 'take' ARGV: ..., now_ms, interval_ms (0: the vendor has no budget, only its pause is read), n,
--   lookahead_ms: the slots that begin within the lookahead, at most n, each interval_ms after the one
--   before. Returns {state, first_slot, count, until}: state 'go'; 'probe' when the pause is over but no
--   probe is out yet (count is then at most 1: that run is the probe); 'held' while the pause holds
--   (nothing taken; until: when it ends, or false while its probe is out). count 0: none, the next slot
--   is past the lookahead; nothing taken.
-- 'give_back' ARGV: ..., interval_ms, end_ms (the budget's value after the take), count: the last count
--   slots of that take were not used (their runs were claimed meanwhile by another worker): given back
--   unless another take came since (then they are simply lost: the vendor is asked less, never more).
if ARGV[1] == 'take' then
  local now, interval, n, ahead = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
  local state = 'go'
  local p = redis.call('HMGET', KEYS[2], 'until', 'probe', 'probe_exp')
  if p[1] then
    if now < tonumber(p[1]) then return {'held', '0', 0, p[1]} end
    if p[2] and tonumber(p[3] or '0') > now then return {'held', '0', 0, false} end
    state, n = 'probe', math.min(n, 1)
  end
  if interval <= 0 then return {state, tostring(now), n, false} end
  local start = math.max(tonumber(redis.call('GET', KEYS[1]) or '0'), now)
  if start - now > ahead then return {state, tostring(start), 0, false} end
  local count = math.min(n, math.floor((now + ahead - start) / interval) + 1)
  redis.call('SET', KEYS[1], tostring(start + count * interval), 'PX', '3600000')
  return {state, tostring(start), count, false}
end
local interval, last, count = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local tat = tonumber(redis.call('GET', KEYS[1]) or '')
if not tat or math.abs(tat - last) > 0.001 then return 0 end
redis.call('SET', KEYS[1], tostring(last - count * interval), 'KEEPTTL')
return 1
