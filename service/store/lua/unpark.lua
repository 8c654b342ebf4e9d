#!lua
-- Brings a client's oldest parked delivery in one shard back to the shard's due set (at its own due time,
-- or now if that passed): the worker that parked it for want of room (claim_deliveries.lua's 'park'),
-- once one of that client's attempts it holds ended (Deliveries.unpark).
-- KEYS: 1 the client's parked set in the shard, 2 the shard's due deliveries. ARGV: now_ms.
-- Returns how many are still parked there.
local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
if first[1] then
  redis.call('ZREM', KEYS[1], first[1])
  redis.call('ZADD', KEYS[2], 'NX', math.min(tonumber(first[2]), tonumber(ARGV[1])), first[1])
end
return redis.call('ZCARD', KEYS[1])
