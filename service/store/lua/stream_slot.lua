#!lua
-- A client's open event streams and waiting long-polls, across every API pod: a slot is a member of a
-- sorted set scored by its lease's end, so a pod that dies leaves slots that run out by themselves.
-- KEYS[1] the client's streams. ARGV: op ('take' | 'renew' | 'drop'), token, now_ms, lease_ms, cap.
-- Returns 1 when the slot is held (taken or renewed), else 0.
local key, op, token, now = KEYS[1], ARGV[1], ARGV[2], tonumber(ARGV[3])
if op == 'drop' then
  redis.call('ZREM', key, token)
  return 0
end
local lease_ms = tonumber(ARGV[4])
if op == 'take' then
  redis.call('ZREMRANGEBYSCORE', key, '-inf', now)
  if redis.call('ZCARD', key) >= tonumber(ARGV[5]) then return 0 end
elseif not redis.call('ZSCORE', key, token) then
  return 0 -- its lease ran out and the slot went to another stream
end
redis.call('ZADD', key, now + lease_ms, token)
redis.call('PEXPIRE', key, lease_ms)
return 1
