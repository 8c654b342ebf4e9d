#!lua
-- Hands leased work back at once (a worker past its shutdown grace), instead of leaving it to wait for
-- its lease to run out. An item is released only while its due score is still the lease this worker
-- took: a step that finished (or another worker's newer lease) moved it, and is left alone.
-- KEYS: due zset, then two in-flight zsets per item (a subscription's and a client's; the due key stands
-- in for one an item does not have). ARGV: now_ms, then id_1, lease_end_ms_1, id_2, lease_end_ms_2, ...
-- (item i uses KEYS[2i] and KEYS[2i + 1])
-- Returns the number of items released.
local now = tonumber(ARGV[1])
local released = 0
for i = 2, #ARGV, 2 do
  local id, lease_end = ARGV[i], tonumber(ARGV[i + 1])
  local score = tonumber(redis.call('ZSCORE', KEYS[1], id))
  if score and math.abs(score - lease_end) < 1 then
    redis.call('ZADD', KEYS[1], now, id)
    for k = i, i + 1 do
      local inflight = KEYS[k]
      if inflight and inflight ~= KEYS[1] then redis.call('ZREM', inflight, id) end
    end
    released = released + 1
  end
end
return released
