-- Emits an event outside a run transition (subscription.test) to the subscriptions named.
-- ARGV[1] JSON: client, now, retention_ms, event {id,type,body,created}, sub_filter [sub ids]
local ops = cjson.decode(ARGV[1])
return emit(ops['event'], '', ops['client'], ops['sub_filter'], as_filter(ops['sub_filter']), '0',
  tonumber(ops['now']), ops['retention_ms'])
