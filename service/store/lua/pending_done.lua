#!lua
-- Zero retention: one delivery of the event ended for good (delivery_result.lua said so), in the event's
-- own shard. Counts down the event's pending deliveries; at 0 the body (the result) goes. The count may
-- go below 0 for a while: a delivery can end before the relay's last step has added the event's count
-- (relay_done.lua), which then brings it to 0 and drops the body itself.
-- KEYS: 1 the event's pending count, 2 its body. ARGV: retention_ms.
-- Returns 1 when the body was dropped, else 0.
if redis.call('DECR', KEYS[1]) == 0 then
  redis.call('DEL', KEYS[1], KEYS[2])
  return 1
end
redis.call('PEXPIRE', KEYS[1], ARGV[1])
return 0
