#!lua
-- A request budget (GCRA) shared by every worker. KEYS: budget. ARGV: now_ms, interval_ms
-- Reserves the next slot and returns it (the caller waits until then to send).
local now, interval = tonumber(ARGV[1]), tonumber(ARGV[2])
local tat = math.max(tonumber(redis.call('GET', KEYS[1]) or '0'), now)
redis.call('SET', KEYS[1], tostring(tat + interval), 'PX', '3600000')
return tostring(tat)
