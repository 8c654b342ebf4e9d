#!lua
-- A fan-out's deliveries in one subscription shard (the relay's middle step, Runs.relay, and a test
-- event's, Subscriptions.emit_test_event): per event, per subscription of the shard named, a delivery
-- when the subscription is active and asked for the event's type. Idempotent: a delivery's id is the
-- event's and the subscription's (minted by the caller into the subscription's shard), so a fan-out done
-- again creates nothing twice and answers with the deliveries as they stand. An event the relay's mark
-- says was fanned out before (`before`) only reports its deliveries: a subscription created since gets
-- none of it.
-- KEYS: 1 the shard's active deliveries, 2 its due deliveries, then per subscription (in the order of
--   `subs`) its hash, its delivery log and its chain for this run, then per event, per subscription,
--   the delivery (in the order of `dlv`).
-- ARGV[1] JSON: run_id, client, subs [ids], events [{id, type, now, before?, zr?}], dlv [ids: per event,
--   per subscription], any_type (an example event: to the subscription whatever types it asked for).
-- Returns {deliveries created, JSON [per event [ids]]} in the events' order.
local q = cjson.decode(ARGV[1])
local subs, events = q['subs'], q['events']
local S = {}
for i, sid in ipairs(subs) do
  local at = 3 + 3 * (i - 1)
  S[i] = {hash = KEYS[at], log = KEYS[at + 1], chain = KEYS[at + 2], active = KEYS[1], due = KEYS[2]}
end
local first_dlv = 3 + 3 * #subs
local state = {}
for i = 1, #subs do state[i] = redis.call('HMGET', S[i].hash, 'disabled', 'event_types') end
local created, out = 0, {}
for e, ev in ipairs(events) do
  local ids = {}
  for i, sid in ipairs(subs) do
    local n = (e - 1) * #subs + i
    local did, dkey = q['dlv'][n], KEYS[first_dlv + n - 1]
    if ev['before'] then
      if redis.call('EXISTS', dkey) == 1 then table.insert(ids, did) end
    elseif state[i][1] == '0' and (q['any_type'] or matches(ev['type'], state[i][2])) then
      if create_delivery(S[i], dkey, did, ev, sid, q['run_id'], q['client'], ev['now'], ev['zr']) then
        created = created + 1
      end
      table.insert(ids, did)
    end
  end
  -- cjson writes an empty table as {}: the reader takes either as no deliveries.
  table.insert(out, cjson.encode(ids))
end
return {created, '[' .. table.concat(out, ',') .. ']'}
