-- Emits an event outside a run transition to the subscriptions named: subscription.test, or an example
-- of another type (ops.example).
-- ARGV[1] JSON: client, now, retention_ms, event {id,type,body,created}, sub_filter [sub ids], example
-- An example goes to the named subscription whatever event types it asked for, and is not appended to
-- the client's feed (it happened to no run): only its body and its delivery are written. Returns the
-- deliveries created.
local ops = cjson.decode(ARGV[1])
local now, retention_ms = tonumber(ops['now']), ops['retention_ms']
if not ops['example'] then
  return emit(ops['event'], '', ops['client'], ops['sub_filter'], as_filter(ops['sub_filter']), '0',
    now, retention_ms)
end
local ev = ops['event']
if redis.call('EXISTS', k_event(ev['id'])) == 1 then return 0 end
local n = 0
for _, sid in ipairs(ops['sub_filter']) do
  if redis.call('HGET', k_sub(sid), 'disabled') == '0' then
    n = n + create_delivery(ev, sid, '', ops['client'], now, retention_ms)
  end
end
if n > 0 then redis.call('SET', k_event(ev['id']), ev['body'], 'PX', retention_ms) end
return n
