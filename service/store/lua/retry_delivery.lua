-- Sends a delivery again now, on a fresh retry series (the user asked for it): a failed or delivered one,
-- and a pending one too, whose scheduled attempt this one replaces. Refused only while an attempt is
-- being sent (claimed under a lease that has not run out): that attempt's result would race this one.
-- KEYS[1] delivery key. ARGV: now_ms.
-- Returns 'ok', 'missing' or 'in_flight'.
local now = tonumber(ARGV[1])
local d = redis.call('HMGET', KEYS[1], DF.status, DF.id, DF.attempts, DF.subscription_id, DF.client,
  DF.chained, DF.run_id)
local st, id, attempts, sid, client = d[1], d[2], d[3], d[4] or '', d[5] or ''
if not st or not id then return 'missing' end
if st == DLV.PENDING then
  local lease = redis.call('ZSCORE', k_sub_inflight(sid), id)
    or redis.call('ZSCORE', k_client_inflight(client), id)
  if lease and tonumber(lease) > now then return 'in_flight' end
  -- Held back by an in-flight limit: it goes now instead, as the user asked.
  redis.call('ZREM', k_sub_parked(sid), id)
  redis.call('ZREM', k_client_parked(client), id)
  if d[6] == '1' then
    local ckey = k_chain(sid, d[7] or '')
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
redis.call('PERSIST', k_dlv_attempts(id))
redis.call('ZADD', K_DUE_DELIVERIES, now, id)
redis.call('SADD', K_ACTIVE_DELIVERIES, id)
return 'ok'
