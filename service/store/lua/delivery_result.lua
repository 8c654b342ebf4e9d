#!lua
-- Records one delivery attempt and its consequence, atomically.
-- Every key is the subscription's shard's.
-- KEYS: 1 delivery, 2 its attempts, 3 its subscription, 4 the subscription's in-flight, 5 its parked,
--   6 the client's in-flight in the shard, 7 the client's parked in the shard, 8 the shard's due
--   deliveries, 9 its active deliveries, 10 the chain (subscription, run): the caller reads the
--   delivery's subscription, run, event and client first (a plain HMGET) to name them. The event's body
--   and pending count are not among them (they live in the run's shard): when a zero-retention delivery
--   ends for good, the reply says so and the caller counts it down there (pending_done.lua).
-- ARGV[1] JSON: sid, run_id, evt, client (as the caller read them), id, outcome (an OUTCOME: domain.AttemptOutcome, which says what
--   each means), next_at (for RETRY), attempt (JSON string, absent for SKIPPED without attempt), short
--   (the attempt's short form, records.Attempt.short, when it has one), now,
--   retention_ms, disable_after_ms, keep_attempts, status_code, default_max_in_flight
-- Returns {'ok', next_in_chain | '', count_down (1: a zero-retention delivery ended for good)}
-- | {'missing'} | {'stale'} (the record does not name what the caller read: nothing written, the caller
-- reads it again).
local ops = cjson.decode(ARGV[1])
local id, outcome, now = ops['id'], ops['outcome'], tonumber(ops['now'])
local d = redis.call('HMGET', KEYS[1], DF.subscription_id, DF.run_id, DF.event_id, DF.chained, DF.counted,
  DF.created_at, DF.client, DF.series)
if not d[1] then return {'missing'} end
local sid, run_id, evt = d[1], d[2], d[3]
if sid ~= ops['sid'] or (run_id or '') ~= ops['run_id'] or (evt or '') ~= ops['evt']
  or (d[7] or '') ~= ops['client'] then
  return {'stale'}
end
local skey = KEYS[3]
local sub_inflight, sub_parked = KEYS[4], KEYS[5]
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
  redis.call('ZADD', KEYS[8], 'NX', math.min(tonumber(back[j + 1]), now), back[j])
end
-- The attempt frees one of its client's in-flight slots: the client's oldest parked delivery (see
-- claim_deliveries.lua) goes back to the due set, at its own due time.
local parked_key = KEYS[7]
redis.call('ZREM', KEYS[6], id)
redis.call('ZREM', parked_key, id)
local parked = redis.call('ZRANGE', parked_key, '0', '0', 'WITHSCORES')
if parked[1] then
  redis.call('ZREM', parked_key, parked[1])
  redis.call('ZADD', KEYS[8], 'NX', math.min(tonumber(parked[2]), now), parked[1])
end
-- The attempt log: the first attempt in the hash, in its short form when it has one (most deliveries end
-- at their first, and so keep no list), then the list; keep_attempts in all, the first and the latest.
if ops['attempt'] then
  local akey = KEYS[2]
  local first_kept = redis.call('HEXISTS', KEYS[1], DF.first_attempt) == 1
  if ops['short'] and not first_kept and redis.call('EXISTS', akey) == 0 then
    redis.call('HSET', KEYS[1], DF.first_attempt, ops['short'])
  else
    redis.call('RPUSH', akey, ops['attempt'])
    redis.call('LTRIM', akey, -(tonumber(ops['keep_attempts']) - (first_kept and 1 or 0)), '-1')
  end
  redis.call('HINCRBY', KEYS[1], DF.attempts, '1')
end
redis.call('HSET', KEYS[1], DF.updated_at, now)
-- A field that is gone reads as empty (records.Delivery.from_hash), and a hash kept for RETENTION_S is
-- smaller without it.
if (ops['status_code'] or '') == '' then
  redis.call('HDEL', KEYS[1], DF.last_status_code)
else
  redis.call('HSET', KEYS[1], DF.last_status_code, ops['status_code'])
end

if outcome == OUTCOME.RETRY then
  redis.call('HSET', KEYS[1], DF.status, DLV.PENDING, DF.next_attempt_at, ops['next_at'])
  redis.call('ZADD', KEYS[8], ops['next_at'], id)
  return {'ok', '', 0}
end

local final = FINAL_STATUS[outcome] or DLV.FAILED
redis.call('ZREM', KEYS[8], id)
redis.call('SREM', KEYS[9], id)
redis.call('HSET', KEYS[1], DF.status, final)
-- What only a pending delivery needs goes (read as empty, or as 0: records.Delivery.from_hash): its next
-- attempt's time, a series that never restarted; and, below, its place in the chain and its count.
redis.call('HDEL', KEYS[1], DF.next_attempt_at)
if d[8] == '0' then redis.call('HDEL', KEYS[1], DF.series) end

local nxt = ''
if d[4] == '1' then
  local ckey = KEYS[10]
  if redis.call('LINDEX', ckey, '0') == id then
    redis.call('LPOP', ckey)
    nxt = redis.call('LINDEX', ckey, '0') or ''
    if nxt ~= '' then redis.call('ZADD', KEYS[8], now, nxt) end
  else
    redis.call('LREM', ckey, '1', id)
  end
  -- Out of the chain: every reader of the field asks whether it is '1' (retry_delivery, repair).
  redis.call('HDEL', KEYS[1], DF.chained)
end

local count_down = 0
if d[5] == '0' then
  -- Zero retention's: counted down once (the field goes, so a retry that ends again counts nothing
  -- twice), by the caller, in the event's shard.
  redis.call('HDEL', KEYS[1], DF.counted)
  count_down = 1
end
redis.call('PEXPIRE', KEYS[1], ops['retention_ms'])
redis.call('PEXPIRE', KEYS[2], ops['retention_ms'])

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
return {'ok', nxt, count_down}
