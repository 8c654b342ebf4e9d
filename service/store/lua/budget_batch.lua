#!lua
-- Up to n consecutive slots of a vendor's request budget (GCRA, budget.lua) for one claim of runs, in
-- one call on the budget's own key: the claim takes its runs from their shard's due set, so the
-- budget is no longer in the claim's script (a vendor's budget is global: one key per vendor).
-- KEYS: budget. ARGV[1] = op.
-- 'take' ARGV: ..., now_ms, interval_ms, n, lookahead_ms: the slots that begin within the lookahead,
--   at most n, each interval_ms after the one before. Returns {first_slot, count} (count 0: none, the
--   next slot is past the lookahead; nothing taken).
-- 'give_back' ARGV: ..., interval_ms, end_ms (the budget's value after the take), count: the last count
--   slots of that take were not used (their runs were claimed meanwhile by another worker): given back
--   unless another take came since (then they are simply lost: the vendor is asked less, never more).
if ARGV[1] == 'take' then
  local now, interval, n, ahead = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
  local start = math.max(tonumber(redis.call('GET', KEYS[1]) or '0'), now)
  if start - now > ahead then return {tostring(start), 0} end
  local count = math.min(n, math.floor((now + ahead - start) / interval) + 1)
  redis.call('SET', KEYS[1], tostring(start + count * interval), 'PX', 3600000)
  return {tostring(start), count}
end
local interval, last, count = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local tat = tonumber(redis.call('GET', KEYS[1]) or '')
if not tat or math.abs(tat - last) > 0.001 then return 0 end
redis.call('SET', KEYS[1], tostring(last - count * interval), 'KEEPTTL')
return 1
