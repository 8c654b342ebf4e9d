#!lua
-- Claims up to `limit` due deliveries of one shard under a lease, fairly across clients: within each
-- client's in-flight limit in the shard and each subscription's in-flight limit and rate.
-- A delivery held back by a subscription's rate is re-scored to when it may go. A client or a
-- subscription at its in-flight limit has the rest of its due deliveries parked (out of the due set, in
-- a parked set of its own) until one of its deliveries ends (delivery_result.lua brings them back), so
-- that a backlog or hanging receivers never stand in front of other deliveries, and a subscription's
-- next delivery goes as soon as one ends rather than at a later claim's guess. A candidate the caller
-- marks 'park' is parked as well (its client holds all the room this worker gives one client:
-- Deliveries.claim_deliveries; the worker brings it back as one of that client's attempts ends); else
-- the caller gives the client's room in this call, and past it (or past `limit`) a candidate that
-- nothing parks stays due, for a later claim. Every candidate is looked at, so that one claim parks a
-- client's or a subscription's whole surplus among them. (The
-- sweeper puts a pending delivery that is in no due set back in it, parked ones too: a parked set never
-- holds one for longer than SWEEP_INTERVAL_S that nothing else brings back.)
-- The caller reads the due ids first (a plain ZRANGEBYSCORE, past `limit`, so that parking one client's
-- surplus does not take a claim per batch) and each one's subscription, event and client (a plain
-- HMGET), and declares the keys they name; each is claimed only if it is still due now and still names
-- them (a race changes nothing), in the order given.
-- KEYS: the shard's due deliveries, its active deliveries, then per candidate: delivery, subscription,
--   its in-flight, its parked, its rate budget, the client's in-flight in the shard, the client's parked
--   in the shard (the delivery key stands in for those of a candidate whose record was gone). The
--   event's body is not among them: the caller reads it after the claim (it lives with the run that
--   emitted it, in the run's shard).
-- ARGV: now_ms, limit, lease_ms, default_max_in_flight, client_max_in_flight, then per candidate: id,
--   subscription id, event id, client (as read), the client's room in this call | 'park'
-- Returns {{delivery_fields, subscription_fields}, ...}, next_due_score | false}.
local now, limit, lease = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local default_max, client_max = tonumber(ARGV[4]), tonumber(ARGV[5])
local out = {}
local in_flight = {}
local taken = {}  -- per client, claimed by this call
-- One candidate: ARGV from `a`, KEYS from `k`.
local function consider(a, k, park, room)
  local id, want_sid, want_evt, want_client = ARGV[a], ARGV[a + 1], ARGV[a + 2], ARGV[a + 3]
  local dkey, skey, ikey, spkey, bkey = KEYS[k], KEYS[k + 1], KEYS[k + 2], KEYS[k + 3], KEYS[k + 4]
  local cin, cpkey = KEYS[k + 5], KEYS[k + 6]
  local score = redis.call('ZSCORE', KEYS[1], id)
  local d = redis.call('HMGET', dkey, DF.subscription_id, DF.event_id, DF.status, DF.client)
  if not score or tonumber(score) > now then
    -- claimed (or moved) since the caller read it: not this claim's
  elseif not d[1] or not d[2] or d[3] ~= DLV.PENDING then
    redis.call('ZREM', KEYS[1], id)
    -- A pending record that names no event can never be sent: end it, or the sweeper re-adds it.
    if d[3] == DLV.PENDING then redis.call('HSET', dkey, DF.status, DLV.FAILED) end
    redis.call('SREM', KEYS[2], id)
  elseif d[1] ~= want_sid or d[2] ~= want_evt or (d[4] or '') ~= want_client then
    -- not the record the keys were declared for (it cannot change; a caller's slip): left alone
  else
    local client = want_client
    if in_flight[client] == nil then
      redis.call('ZREMRANGEBYSCORE', cin, '-inf', now)
      in_flight[client] = redis.call('ZCARD', cin)
    end
    if park or in_flight[client] >= client_max then
      redis.call('ZREM', KEYS[1], id)
      redis.call('ZADD', cpkey, score, id)
    else
      local s = redis.call('HMGET', skey, 'max_in_flight', 'rate_per_s')
      redis.call('ZREMRANGEBYSCORE', ikey, '-inf', now)
      local held = false
      if redis.call('ZCARD', ikey) >= (tonumber(s[1]) or default_max) then
        redis.call('ZREM', KEYS[1], id)
        redis.call('ZADD', spkey, score, id)
        held = true
      elseif #out >= limit or (taken[client] or 0) >= room then
        return -- nothing holds it back but this call's room: it stays due, a later claim's
      end
      local rate = tonumber(s[2]) or 0
      if not held and rate > 0 then
        -- Within the API's bounds (delivery/schedule.py), whatever the record says: a rate of 1e-300
        -- stored before them would park its deliveries 1e+303 ms ahead. NaN fails `rate > 0` above.
        local interval = 1000 / math.min(math.max(rate, 0.001), 10000)
        local tat = math.min(math.max(tonumber(redis.call('GET', bkey) or '0') or 0, now), now + interval)
        if tat > now then
          redis.call('ZADD', KEYS[1], tat, id)
          held = true
        else
          redis.call('SET', bkey, tostring(tat + interval), 'PX', '3600000')
        end
      end
      if not held then
        redis.call('ZADD', ikey, now + lease, id)
        redis.call('ZADD', cin, now + lease, id)
        redis.call('ZREM', cpkey, id)
        redis.call('ZREM', spkey, id)
        redis.call('PEXPIRE', cin, lease * 2)
        in_flight[client] = in_flight[client] + 1
        taken[client] = (taken[client] or 0) + 1
        redis.call('ZADD', KEYS[1], now + lease, id)
        table.insert(out, {redis.call('HGETALL', dkey), redis.call('HGETALL', skey)})
      end
    end
  end
end
local c = 0
for a = 6, #ARGV, 5 do
  consider(a, 3 + 7 * c, ARGV[a + 4] == 'park', tonumber(ARGV[a + 4]) or 0)
  c = c + 1
end
local nxt = redis.call('ZRANGE', KEYS[1], '0', '0', 'WITHSCORES')
return {out, nxt[2] or false}
