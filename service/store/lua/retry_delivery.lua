#!lua
-- Sends a delivery again now, on a fresh retry series (the user asked for it): a failed or delivered one,
-- and a pending one too, whose scheduled attempt this one replaces. Refused only while an attempt is
-- being sent (claimed under a lease that has not run out): that attempt's result would race this one.
-- KEYS: 1 delivery, 2 its attempts, 3 its subscription's in-flight, 4 the client's in-flight, 5 the
--   subscription's parked, 6 the client's parked, 7 the chain (subscription, run), 8 due deliveries,
--   9 active deliveries: the caller reads the delivery's subscription, client and run first (a plain
--   HMGET) to name them.
-- ARGV: now_ms, sid, client, run_id (as the caller read them).
-- Returns 'ok', 'missing', 'in_flight' or 'stale' (the record does not name what the caller read:
-- nothing written, the caller reads it again).
local now = tonumber(ARGV[1])
local d = redis.call('HMGET', KEYS[1], DF.status, DF.id, DF.attempts, DF.subscription_id, DF.client,
  DF.chained, DF.run_id)
local st, id, attempts, sid, client = d[1], d[2], d[3], d[4] or '', d[5] or ''
if not st or not id then return 'missing' end
if sid ~= ARGV[2] or client ~= ARGV[3] or (d[7] or '') ~= ARGV[4] then return 'stale' end
if st == DLV.PENDING then
  local lease = redis.call('ZSCORE', KEYS[3], id)
    or redis.call('ZSCORE', KEYS[4], id)
  if lease and tonumber(lease) > now then return 'in_flight' end
  -- Held back by an in-flight limit: it goes now instead, as the user asked.
  redis.call('ZREM', KEYS[5], id)
  redis.call('ZREM', KEYS[6], id)
  if d[6] == '1' then
    local ckey = KEYS[7]
    if redis.call('LINDEX', ckey, 0) ~= id then
      -- Waiting behind an earlier event of its run: it leaves the chain, or the head's end would make
      -- it due a second time (delivery_result.lua) while it is already being sent.
      redis.call('LREM', ckey, 1, id)
      redis.call('HSET', KEYS[1], DF.chained, 0)
    end
  end
end
-- `series` is the attempts made before this resend: the deliverer counts failures from there
-- (attempts - series + 1), so a failure of this attempt waits the schedule's first step again.
redis.call('HSET', KEYS[1], DF.status, DLV.PENDING, DF.next_attempt_at, now, DF.series, attempts or 0,
  DF.updated_at, now)
redis.call('PERSIST', KEYS[1])
redis.call('PERSIST', KEYS[2])
redis.call('ZADD', KEYS[8], now, id)
redis.call('SADD', KEYS[9], id)
return 'ok'
