-- The sweeper's check of one run or one delivery, atomic so that it never acts on a stale read.
-- KEYS[1] the run or delivery key. ARGV: kind ('run' | 'delivery'), now_ms, id
-- The sweeper walks the active runs and deliveries (keys.ACTIVE_RUNS, keys.ACTIVE_DELIVERIES) (work not finished), so a pass costs what is
-- in flight, not what is kept; an id whose work is gone or done leaves its set here.
-- Returns 1 when it scheduled work that had no place in a due set, else 0.
local kind, now = ARGV[1], tonumber(ARGV[2])
if kind == 'run' then
  local raw = redis.call('GET', KEYS[1])
  if not raw then
    redis.call('SREM', K_ACTIVE_RUNS, ARGV[3])
    return 0
  end
  local run = cjson.decode(raw)
  local terminal = TERMINAL[run['status']]
  -- The vendor still to be told (cancel, delete) is work too; '_vendor_cancel' is the pre-records name.
  local tell = run['vendor_cancel_pending'] or run['vendor_delete_pending'] or run['_vendor_cancel']
    or run['_vendor_delete']
  if terminal and not tell then
    redis.call('SREM', K_ACTIVE_RUNS, ARGV[3])
    return 0
  end
  return redis.call('ZADD', k_due_runs(run['vendor']), 'NX', now, run['id'])
end

local d = redis.call('HMGET', KEYS[1], DF.id, DF.status, DF.chained, DF.subscription_id, DF.run_id)
if not d[1] or d[2] ~= DLV.PENDING then
  redis.call('SREM', K_ACTIVE_DELIVERIES, ARGV[3])
  return 0
end
if d[3] == '1' then
  local ckey = k_chain(d[4], d[5])
  while true do
    local head = redis.call('LINDEX', ckey, 0)
    if not head then
      redis.call('RPUSH', ckey, d[1])
      break
    end
    if head == d[1] then break end
    if redis.call('HGET', k_dlv(head), DF.status) == DLV.PENDING then
      return 0 -- waits behind an earlier event of its run
    end
    redis.call('LPOP', ckey) -- a head that is no longer pending holds nothing back
  end
end
return redis.call('ZADD', K_DUE_DELIVERIES, 'NX', now, d[1])
