#!lua
-- Claims due runs of one vendor under a lease. A worker that dies leaves the lease to run out: the run is
-- then due again. The caller reads the due ids first (a plain ZRANGEBYSCORE, or the ids this script
-- gave it last time) and declares their run keys, and takes the vendor's budget slots for them first
-- (budget_batch.lua: the budget and the pause are the vendor's, global, in slots of their own); each run
-- is claimed only while it is still due now (another worker may have claimed it since), in the order
-- given, at most `count` of them, the i-th claimed at slot start + i * interval, leased until its slot
-- + lease_ms.
-- KEYS: due_runs, then the run key of each id. ARGV: now_ms, lease_ms, start (the first slot), interval_ms
-- (0: every slot is now), count (the slots taken), ahead (how many of the ids still due to give back),
-- then the ids (in the order of their keys)
-- Returns {{id, due_score, slot_ms, run_json, ...}, next_due_score | false, {ids due now, at most
-- ahead}}: the caller gives back the slots it did not use, sets the probe (pause.lua) when the vendor is
-- paused, and claims the ids due next time without reading them first (a busy worker's claim is then
-- two calls, not three).
local now, lease = tonumber(ARGV[1]), tonumber(ARGV[2])
local start, interval, count = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local ahead = tonumber(ARGV[6])
local out = {}
local claimed = 0
for i = 7, #ARGV do
  if claimed >= count then break end
  local id = ARGV[i]
  local due = redis.call('ZSCORE', KEYS[1], id)
  if due and tonumber(due) <= now then
    local doc = redis.call('GET', KEYS[i - 5])
    if doc then
      local slot = start + claimed * interval
      claimed = claimed + 1
      redis.call('ZADD', KEYS[1], slot + lease, id)
      table.insert(out, id)
      table.insert(out, due)
      table.insert(out, tostring(slot))
      table.insert(out, doc)
    else
      redis.call('ZREM', KEYS[1], id)
    end
  end
end
local nxt = redis.call('ZRANGE', KEYS[1], '0', '0', 'WITHSCORES')
local due = {}
if ahead > 0 and nxt[2] and tonumber(nxt[2]) <= now then
  due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', '0', ARGV[6])
end
return {out, nxt[2] or false, due}
