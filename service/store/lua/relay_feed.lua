#!lua
-- The client's side of a fan-out, after its deliveries (fanout_deliveries.lua, in the subscriptions'
-- shards): the events go into the client's feed, so that there is never an event in the feed without its
-- deliveries.
-- A relay ('relay'): the client's directory is read again, and a subscription the events would go to
-- that the caller did not fan out to (created meanwhile) makes the answer 'stale' (nothing written: the
-- caller fans out again, which creates nothing twice). Each entry carries the run's version after its
-- transition (v), and the run's mark holds the highest version appended, so an entry at or below it was
-- appended before: nothing goes into the feed twice.
-- A test event ('test'): appended, no directory, no mark.
-- KEYS: 1 the client's subscriptions, 2 the run's relay mark, 3 the client's feed (a test event: 3 only,
--   1 and 2 stand in for by the feed).
-- ARGV[1] JSON: mode, run_id, subs [the subscriptions fanned out to], sub_filter, mark_ms, retention_ms,
--   entries [{v, events [{id, type, vendor?, body? (its position in ARGV: the feed keeps its body),
--   n (its size)}]}]; the run id and each event id as their positions in ARGV, where they are in the feed's
--   stored forms (bytes), and the types as their codes (service/store/feedform.py). ARGV[2..]: those ids and
--   the bodies the feed keeps.
-- Returns {'ok', appended} | {'stale'}.
local q = cjson.decode(ARGV[1])
local appended = 0
if q['mode'] == 'test' then
  for _, entry in ipairs(q['entries']) do
    for _, ev in ipairs(entry['events']) do
      append_feed(KEYS[3], ARGV[ev['id']], ev, '', ev['body'] and ARGV[ev['body']], ev['n'], q['retention_ms'])
      appended = appended + 1
    end
  end
  return {'ok', appended}
end
local filter, declared = as_filter(q['sub_filter']), {}
for _, sid in ipairs(q['subs']) do declared[sid] = true end
for _, sid in ipairs(redis.call('ZRANGE', KEYS[1], '0', '-1')) do
  if (filter == nil or filter[sid]) and not declared[sid] then return {'stale'} end
end
local mark = tonumber(redis.call('GET', KEYS[2]) or '0')
local last, last_text = mark, nil -- the highest version, and as it came (set as text: scripts.py)
for _, entry in ipairs(q['entries']) do
  local v = tonumber(entry['v'] or '')
  if v == nil or v > mark then
    for _, ev in ipairs(entry['events']) do
      append_feed(KEYS[3], ARGV[ev['id']], ev, ARGV[q['run_id']], ev['body'] and ARGV[ev['body']], ev['n'],
        q['retention_ms'])
      appended = appended + 1
    end
  end
  if v and v > last then last, last_text = v, entry['v'] end
end
if last_text then redis.call('SET', KEYS[2], last_text, 'PX', q['mark_ms']) end
return {'ok', appended}
