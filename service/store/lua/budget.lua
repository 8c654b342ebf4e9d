-- A request budget (GCRA) shared by every worker. KEYS: budget. ARGV: now_ms, interval_ms, mode, until_ms
-- mode 'take': reserve the next slot, return it (the caller waits until then to send).
-- mode 'push': no slot before until_ms (the vendor said 429 / Retry-After).
local now, interval = tonumber(ARGV[1]), tonumber(ARGV[2])
local tat = math.max(tonumber(redis.call('GET', KEYS[1]) or '0'), now)
if ARGV[3] == 'push' then
  tat = math.max(tat, tonumber(ARGV[4]))
  redis.call('SET', KEYS[1], tostring(tat), 'PX', 3600000)
  return tostring(tat)
end
redis.call('SET', KEYS[1], tostring(tat + interval), 'PX', 3600000)
return tostring(tat)
