-- Sends a delivery again now, on a fresh retry series, outside its chain (the user asked for it).
-- KEYS[1] delivery key. ARGV: now_ms. Returns 1, or 0 when it is missing or already pending.
local st = redis.call('HGET', KEYS[1], DF.status)
if not st or st == DLV.PENDING then return 0 end
local id = redis.call('HGET', KEYS[1], DF.id)
local attempts = redis.call('HGET', KEYS[1], DF.attempts)
redis.call('HSET', KEYS[1], DF.status, DLV.PENDING, DF.next_attempt_at, ARGV[1], DF.series, attempts,
  DF.updated_at, ARGV[1])
redis.call('PERSIST', KEYS[1])
redis.call('PERSIST', k_dlv_attempts(id))
redis.call('ZADD', K_DUE_DELIVERIES, ARGV[1], id)
redis.call('SADD', K_ACTIVE_DELIVERIES, id)
return 1
