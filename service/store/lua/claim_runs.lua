-- Claims up to `limit` due runs of one vendor under a lease, taking one slot of the vendor's request
-- budget (GCRA) for each. A worker that dies leaves the lease to run out: the run is then due again.
-- The vendor's pause (pause.lua, after a 429) holds every claim until its `until`; then exactly one run
-- is claimed as the probe, and nothing more until the probe's answer ends the pause or extends it.
-- KEYS: due_runs, budget, pause. ARGV: now_ms, limit, lease_ms, interval_ms (0 = no budget), lookahead_ms,
-- probe_lease_ms
-- Returns {{id, due_score, slot_ms, run_json, ...}, next_due_score | false, probe_token | false}.
local now, limit, lease = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local interval, ahead = tonumber(ARGV[4]), tonumber(ARGV[5])
local probe_lease = tonumber(ARGV[6])

local probing = false
local pause = redis.call('HMGET', KEYS[3], 'until', 'probe', 'probe_exp')
if pause[1] then
  local untl = tonumber(pause[1])
  local nxt = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
  if now < untl then
    return {{}, nxt[2] and tostring(math.max(tonumber(nxt[2]), untl)) or false, false}
  end
  if pause[2] and tonumber(pause[3] or '0') > now then
    return {{}, false, false}  -- the probe is out: wait for its answer
  end
  probing = true
  limit = 1
end

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
  local doc = redis.call('GET', k_run(id))
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
local token = false
if probing and #out > 0 then
  token = out[1] .. '@' .. tostring(now)
  redis.call('HSET', KEYS[3], 'probe', token, 'probe_exp', tostring(tonumber(out[3]) + probe_lease))
end
local nxt = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
return {out, nxt[2] or false, token}
