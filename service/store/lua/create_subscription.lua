#!lua
-- Writes a new subscription and its listing entry unless the client already has its quota of them.
-- KEYS: subscription, client_subs. ARGV: created_ms, sub_id, max_count, then field, value, ...
-- Returns 1, or 0 when the client is at its quota (nothing written).
if redis.call('ZCARD', KEYS[2]) >= tonumber(ARGV[3]) then return 0 end
redis.call('HSET', KEYS[1], unpack(ARGV, 4))
redis.call('ZADD', KEYS[2], ARGV[1], ARGV[2])
return 1
