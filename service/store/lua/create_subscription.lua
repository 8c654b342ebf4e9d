#!lua
-- Adds a new subscription to its client's directory unless the client already has its quota of them,
-- and its event types beside it (keys.client_sub_types: what the relay reads to skip a fan-out nobody
-- wants). The subscription's hash is written first, in its own shard (Subscriptions.create_subscription),
-- and dropped again when this refuses.
-- KEYS: client_subs, client_sub_types. ARGV: created_ms, sub_id, max_count, event types (a JSON list).
-- Returns 1, or 0 when the client is at its quota (nothing written).
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[3]) then return 0 end
redis.call('ZADD', KEYS[1], ARGV[1], ARGV[2])
redis.call('HSET', KEYS[2], ARGV[2], ARGV[4])
return 1
