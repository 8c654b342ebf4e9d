#!lua
-- Adds a new subscription to its client's directory unless the client already has its quota of them.
-- The subscription's hash is written first, in its own shard (Subscriptions.create_subscription), and
-- dropped again when this refuses.
-- KEYS: client_subs. ARGV: created_ms, sub_id, max_count.
-- Returns 1, or 0 when the client is at its quota (nothing written).
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[3]) then return 0 end
redis.call('ZADD', KEYS[1], ARGV[1], ARGV[2])
return 1
