#!lua
-- The sweeper's check of one run or one delivery, atomic so that it never acts on a stale read.
-- A run: KEYS 1 run, 2 its shard's active runs, then its shard's due set of each vendor named in ARGV[4..] (every vendor
--   the worker serves: the script picks the run's own, so nothing is read first). ARGV: 'run', now_ms,
--   id, vendors...
-- A delivery: the caller reads what names the other keys first (the delivery's chain and the chain's
-- heads before it) and declares them; what changed since is left to the next pass.
-- A delivery: KEYS 1 delivery, 2 its chain (the delivery key stands in for an unchained one), 3 due
--   deliveries and 4 active deliveries (its shard's), then the delivery key of each id in ARGV[6..] (the chain's heads
--   before it, as read). ARGV: 'delivery', now_ms, id, subscription id, run id (as read), head ids...
-- The sweeper walks the active runs (keys.active_runs, one set per shard) and deliveries
-- (keys.active_deliveries, one set per shard): work not finished, so a pass costs what is in flight,
-- not what is kept; an id whose work is gone or done leaves its set here.
-- Returns 1 when it scheduled work that had no place in a due set, else 0.
local kind, now = ARGV[1], tonumber(ARGV[2])
if kind == 'run' then
  local raw = redis.call('GET', KEYS[1])
  if not raw then
    redis.call('SREM', KEYS[2], ARGV[3])
    return 0
  end
  local run = cjson.decode(raw)
  local terminal = TERMINAL[run['status']]
  -- The vendor still to be told (cancel, delete) is work too; '_vendor_cancel' is the pre-records name.
  local tell = run['vendor_cancel_pending'] or run['vendor_delete_pending'] or run['_vendor_cancel']
    or run['_vendor_delete']
  if terminal and not tell then
    redis.call('SREM', KEYS[2], ARGV[3])
    return 0
  end
  for i = 4, #ARGV do
    if ARGV[i] == run['vendor'] then return redis.call('ZADD', KEYS[i - 1], 'NX', now, ARGV[3]) end
  end
  return 0 -- a vendor this worker does not serve: none of its workers would claim it either
end

local d = redis.call('HMGET', KEYS[1], DF.id, DF.status, DF.chained, DF.subscription_id, DF.run_id)
if not d[1] or d[2] ~= DLV.PENDING then
  redis.call('SREM', KEYS[4], ARGV[3])
  return 0
end
if d[3] == '1' then
  if d[4] ~= ARGV[4] or (d[5] or '') ~= ARGV[5] then return 0 end -- not the chain declared
  local declared = {}
  for i = 6, #ARGV do declared[ARGV[i]] = KEYS[i - 1] end
  local ckey = KEYS[2]
  while true do
    local head = redis.call('LINDEX', ckey, 0)
    if not head then
      redis.call('RPUSH', ckey, d[1])
      break
    end
    if head == d[1] then break end
    if not declared[head] then return 0 end -- the chain moved since the caller read it: the next pass
    if redis.call('HGET', declared[head], DF.status) == DLV.PENDING then
      return 0 -- waits behind an earlier event of its run
    end
    redis.call('LPOP', ckey) -- a head that is no longer pending holds nothing back
  end
end
return redis.call('ZADD', KEYS[3], 'NX', now, d[1])
