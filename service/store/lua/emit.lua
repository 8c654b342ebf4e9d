#!lua
-- Emits an event outside a run transition to the subscriptions named: subscription.test, or an example
-- of another type (ops.example).
-- KEYS: the fan-out block (_fanout.lua) from 1, for the event and the subscriptions of sub_filter,
--   without the event's body: the caller stored it first, in the event's own shard.
-- ARGV[1] JSON: client, now, retention_ms, event {id,type,body,created}, sub_filter [sub ids], example;
--   the event's body is ARGV[event.body] (its packed bytes: _fanout.lua's with_bodies)
-- An example goes to the named subscription whatever event types it asked for, and is not appended to
-- the client's feed (it happened to no run): only its delivery is written. Returns the deliveries
-- created.
local ops = cjson.decode(ARGV[1])
local now, retention_ms = tonumber(ops['now']), ops['retention_ms']
local ev = with_bodies({ops['event']}, ARGV)[1]
local F = fanout_keys(KEYS, 1, {ev}, ops['sub_filter'])
-- Emitted already (a delivery of it exists): nothing twice.
for _, sid in ipairs(ops['sub_filter']) do
  if redis.call('EXISTS', F.dlv[ev['id'] .. ' ' .. sid]) == 1 then return 0 end
end
local n = 0
if not ops['example'] then
  local _, created, dropped = fan_out(F, ev, '', ops['client'], ops['sub_filter'],
    as_filter(ops['sub_filter']), '0', now, retention_ms)
  if dropped then return 0 end
  n = created
else
  for _, sid in ipairs(ops['sub_filter']) do
    if redis.call('HGET', F.sub[sid].hash, 'disabled') == '0' then
      local _, new = create_delivery(F, ev, sid, '', ops['client'], now)
      if new then n = n + 1 end
    end
  end
end
return n
