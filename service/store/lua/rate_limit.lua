-- A per-client rate (GCRA) shared by every API pod, on Redis's clock so that pods' clocks do not matter.
-- KEYS[1] the limiter's key. ARGV: interval_ms (1000 / rate), burst (requests allowed at once), mode
-- mode 'take' counts the request when it may go; 'peek' only answers (nothing is written).
-- Returns 0 when the request may go, else how many ms until it may.
local interval, burst = tonumber(ARGV[1]), tonumber(ARGV[2])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local tat = math.max(tonumber(redis.call('GET', KEYS[1]) or '0'), now)
local allow_at = tat - (burst - 1) * interval
if allow_at > now then return math.ceil(allow_at - now) end
if ARGV[3] == 'take' then
  redis.call('SET', KEYS[1], tostring(tat + interval), 'PX', math.ceil(tat + interval - now) + 1000)
end
return 0
