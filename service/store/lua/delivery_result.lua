-- Records one delivery attempt and its consequence, atomically.
-- KEYS[1] delivery key. ARGV[1] JSON: id, outcome (an OUTCOME: domain.AttemptOutcome, which says what
--   each means), next_at (for RETRY), attempt (JSON string, absent for SKIPPED without attempt), now,
--   retention_ms, disable_after_ms, keep_attempts, status_code, default_max_in_flight
-- Returns {'ok', next_in_chain | ''} | {'missing'}.
local ops = cjson.decode(ARGV[1])
local id, outcome, now = ops['id'], ops['outcome'], tonumber(ops['now'])
local d = redis.call('HMGET', KEYS[1], DF.subscription_id, DF.run_id, DF.event_id, DF.chained, DF.counted,
  DF.created_at, DF.client)
if not d[1] then return {'missing'} end
local sid, run_id, evt = d[1], d[2], d[3]
local skey = k_sub(sid)
local sub_inflight, sub_parked = k_sub_inflight(sid), k_sub_parked(sid)
redis.call('ZREM', sub_inflight, id)
-- The attempt frees one of its subscription's in-flight slots: its oldest parked deliveries (see
-- claim_deliveries.lua) go back to the due set, as many as it has room for (more than one when its
-- limit was raised), at least one, at most 100 in one step.
redis.call('ZREM', sub_parked, id)
local sub_max = tonumber(redis.call('HGET', skey, 'max_in_flight'))
  or tonumber(ops['default_max_in_flight']) or 1
local room = math.max(1, math.min(100, sub_max - redis.call('ZCARD', sub_inflight)))
local back = redis.call('ZRANGE', sub_parked, 0, room - 1, 'WITHSCORES')
for j = 1, #back, 2 do
  redis.call('ZREM', sub_parked, back[j])
  redis.call('ZADD', K_DUE_DELIVERIES, 'NX', math.min(tonumber(back[j + 1]), now), back[j])
end
-- The attempt frees one of its client's in-flight slots: the client's oldest parked delivery (see
-- claim_deliveries.lua) goes back to the due set, at its own due time.
local parked_key = k_client_parked(d[7] or '')
redis.call('ZREM', k_client_inflight(d[7] or ''), id)
redis.call('ZREM', parked_key, id)
local parked = redis.call('ZRANGE', parked_key, 0, 0, 'WITHSCORES')
if parked[1] then
  redis.call('ZREM', parked_key, parked[1])
  redis.call('ZADD', K_DUE_DELIVERIES, 'NX', math.min(tonumber(parked[2]), now), parked[1])
end
if ops['attempt'] then
  local akey = k_dlv_attempts(id)
  redis.call('RPUSH', akey, ops['attempt'])
  redis.call('LTRIM', akey, -ops['keep_attempts'], -1)
  redis.call('HINCRBY', KEYS[1], DF.attempts, 1)
end
redis.call('HSET', KEYS[1], DF.updated_at, now, DF.last_status_code, ops['status_code'] or '')

if outcome == OUTCOME.RETRY then
  redis.call('HSET', KEYS[1], DF.status, DLV.PENDING, DF.next_attempt_at, ops['next_at'])
  redis.call('ZADD', K_DUE_DELIVERIES, ops['next_at'], id)
  return {'ok', ''}
end

local final = FINAL_STATUS[outcome] or DLV.FAILED
redis.call('ZREM', K_DUE_DELIVERIES, id)
redis.call('SREM', K_ACTIVE_DELIVERIES, id)
redis.call('HSET', KEYS[1], DF.status, final, DF.next_attempt_at, '')

local nxt = ''
if d[4] == '1' then
  local ckey = k_chain(sid, run_id)
  if redis.call('LINDEX', ckey, 0) == id then
    redis.call('LPOP', ckey)
    nxt = redis.call('LINDEX', ckey, 0) or ''
    if nxt ~= '' then redis.call('ZADD', K_DUE_DELIVERIES, now, nxt) end
  else
    redis.call('LREM', ckey, 1, id)
  end
  redis.call('HSET', KEYS[1], DF.chained, 0)
end

if d[5] == '0' then
  redis.call('HSET', KEYS[1], DF.counted, 1)
  local pkey = k_event_pending(evt)
  if redis.call('EXISTS', pkey) == 1 and redis.call('DECR', pkey) <= 0 then
    -- Zero retention: every delivery of the event has ended, so its body (the result) goes.
    redis.call('DEL', k_event(evt), pkey)
  end
end
redis.call('PEXPIRE', KEYS[1], ops['retention_ms'])
redis.call('PEXPIRE', k_dlv_attempts(id), ops['retention_ms'])

if redis.call('EXISTS', skey) == 1 then
  if outcome == OUTCOME.SUCCEEDED then
    redis.call('HSET', skey, 'failing_since', '', 'consecutive_failures', 0)
  elseif outcome == OUTCOME.GONE then
    redis.call('HSET', skey, 'disabled', 1, 'disabled_reason', 'the endpoint answered 410 Gone', 'updated', now)
  elseif outcome == OUTCOME.FAILED then
    redis.call('HINCRBY', skey, 'consecutive_failures', 1)
    local since = redis.call('HGET', skey, 'failing_since')
    if not since or since == '' then
      since = d[6]
      redis.call('HSET', skey, 'failing_since', since)
    end
    if now - tonumber(since) >= tonumber(ops['disable_after_ms']) then
      redis.call('HSET', skey, 'disabled', 1, 'updated', now,
        'disabled_reason', 'deliveries kept failing since ' .. since .. ' (ms since epoch)')
    end
  end
end
return {'ok', nxt}
