-- Claims up to `limit` due runs of one vendor under a lease, taking one slot of the vendor's request
-- budget (GCRA) for each. A worker that dies leaves the lease to run out: the run is then due again.
-- KEYS: due_runs, budget. ARGV: now_ms, limit, lease_ms, interval_ms (0 = no budget), lookahead_ms
-- Returns {{id, due_score, slot_ms, run_json, ...}, next_due_score | false}.
local now, limit, lease = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local interval, ahead = tonumber(ARGV[4]), tonumber(ARGV[5])
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'WITHSCORES', 'LIMIT', 0, limit)
local out = {}
local tat = now
if interval > 0 then tat = math.max(tonumber(redis.call('GET', KEYS[2]) or '0'), now) end
for i = 1, #due, 2 do
  local id = due[i]
  local slot = now
  if interval > 0 then
    slot = math.max(tat, now)
    if slot - now > ahead then break end
    tat = slot + interval
  end
  local doc = redis.call('GET', 'hb:run:' .. id)
  if doc then
    redis.call('ZADD', KEYS[1], slot + lease, id)
    table.insert(out, id)
    table.insert(out, due[i + 1])
    table.insert(out, tostring(slot))
    table.insert(out, doc)
  else
    redis.call('ZREM', KEYS[1], id)
  end
end
if interval > 0 then redis.call('SET', KEYS[2], tostring(tat), 'PX', 3600000) end
local nxt = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
return {out, nxt[2] or false}
