#!lua
-- A per-client rate (GCRA) shared by every API pod, on Redis's clock so that pods' clocks do not matter.
-- gcra(key, interval_ms (1000 / rate), burst (requests allowed at once), take): 0 when the request may go
-- (counted when ``take``; a peek writes nothing), else how many ms until it may.
local function gcra(key, interval, burst, take)
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  local tat = math.max(tonumber(redis.call('GET', key) or '0'), now)
  local allow_at = tat - (burst - 1) * interval
  if allow_at > now then return math.ceil(allow_at - now) end
  if take then
    redis.call('SET', key, tostring(tat + interval), 'PX', math.ceil(tat + interval - now) + 1000)
  end
  return 0
end
-- The same limiter with a cost per request (a scan's entries), on Redis's clock ``now``: how many units may
-- be taken now (at most ``burst``) when that is at least ``need``, else 0 and how many ms until ``need`` may.
local function gcra_room(key, interval, burst, need, now)
  local tat = math.max(tonumber(redis.call('GET', key) or '0'), now)
  local room = math.floor((now + burst * interval - tat) / interval)
  if room >= need then return math.min(room, burst), 0 end
  return 0, math.max(1, math.ceil(tat - (burst - need) * interval - now))
end
-- Takes ``cost`` units (the caller checked the room first with gcra_room).
local function gcra_charge(key, interval, cost, now)
  if cost <= 0 then return end
  local tat = math.max(tonumber(redis.call('GET', key) or '0'), now) + cost * interval
  redis.call('SET', key, tostring(tat), 'PX', math.ceil(tat - now) + 1000)
end
