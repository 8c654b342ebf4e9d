#!lua
-- One state change of a run, in one atomic step. The events it emits are put in the run's outbox, in the
-- same step, and their bodies stored (what the run's record names is readable as soon as the record is).
-- A run.progress's body is not stored here: the outbox holds it, and the relay stores it only for a
-- fan-out that may deliver it (fanout.stored_by_relay; most go to the client's feed alone). The relay
-- (Runs.relay: the fan-out, relay_feed.lua, relay_done.lua) fans the events out to the subscriptions and
-- the client's feed right after, and the sweeper relays what a crash left there. So on a cluster the run's
-- own keys are all this script touches (issue 26: a run's shard holds them; its events reach the
-- subscriptions' shards by the relay). On one Redis server, which has no slots, events that no
-- subscription may want go to the client's feed here (ops.feed, below): most run.progress events.
-- KEYS: 1 run, 2 the vendor's due set, 3 active runs, 4 result, 5 document, 6 run events, 7 the run's
--   outbox, 8 the outbox index, then the body key of each event stored here. A change that only rewrites
--   the run and moves or keeps its due score declares KEYS 1-2 alone: the others are touched only for
--   events, a result, the document, due_remove and ttl_ms.
-- ARGV[2] the new run (JSON). ARGV[3] the result to keep (JSON), if ops.result. From ARGV[ops.relay]:
--   the outbox entry (the relay's ops, JSON, then the events' packed bodies: ops.relay_n items), if the
--   change has events.
-- ARGV[1] JSON: run_id, expect_v, status (the new run's); with KEYS 3-8 also now, retention_ms;
--   due_score (absent = leave alone), due_remove (bool), result (bool: ARGV[3] is the result), relay (the
--   entry's position), bodies (the body of each event stored here, by its position in ARGV), del_doc
--   (bool), ttl_ms (set on terminal runs)
--   feed (one Redis server only: Runs._transition_call): the client's feed part, for a change whose
--   events may go to the feed alone: k (KEYS[k], k+1, k+2: the client's subscriptions, its directory's
--   types, its feed), sub_filter (the run's subscriptions, if it names any), run (the run id's stored form,
--   its ARGV position), events [{id (ARGV position), etype, type (its code), vendor?, n, body? (ARGV
--   position: the body the feed keeps)}], as relay_feed.lua takes them.
-- With a feed part, when the run's outbox is empty (every event before these is in the feed already) and
-- no subscription may want one of the events (the directory's types, never narrower than a
-- subscription's own, match none; a subscription with none kept may want anything), the events go to the
-- feed here, in the change's own step, and not to the outbox: there is nothing to relay. Otherwise they go
-- to the outbox as on a cluster, and the relay takes them to the subscriptions and the feed.
-- Returns {'ok', entries in the outbox, previous_status, fed (1: the events went to the feed here)} |
--   {'missing'} | {'conflict', current_doc}.
-- A rewrite keeps the record's expiry (KEEPTTL): a terminal run told to the vendor, or touched after a
-- transient fault, still expires when retention says; only ttl_ms sets a new one.
local ops = cjson.decode(ARGV[1])
local cur = redis.call('GET', KEYS[1])
if not cur then return {'missing'} end
-- The status and version from the record's head (RUN_HEAD: scripts.run_head), or from the whole of a record
-- written in another form.
local status, version = string.match(cur, RUN_HEAD)
if not status then
  local run = cjson.decode(cur)
  -- '_v': a run written before the record's fields had one name (records.Run.from_json reads it too).
  status, version = run['status'], run['version'] or run['_v']
end
if tonumber(version) ~= tonumber(ops['expect_v']) then return {'conflict', cur} end
if TERMINAL[status] and status ~= ops['status'] then
  return {'conflict', cur}
end

local run_id = ops['run_id']
redis.call('SET', KEYS[1], ARGV[2], 'KEEPTTL')

if ops['due_score'] then
  redis.call('ZADD', KEYS[2], ops['due_score'], run_id)
elseif ops['due_remove'] then
  redis.call('ZREM', KEYS[2], run_id)
  redis.call('SREM', KEYS[3], run_id) -- nothing left to do for it
end
if ops['result'] then redis.call('SET', KEYS[4], ARGV[3], 'KEEPTTL') end
if ops['del_doc'] then redis.call('DEL', KEYS[5]) end

local pending, fed = 0, 0
if ops['relay'] then
  local feed = ops['feed']
  if feed and redis.call('LLEN', KEYS[7]) == 0
    and not may_be_wanted(KEYS[feed['k']], KEYS[feed['k'] + 1], feed['sub_filter'], feed['events']) then
    for _, ev in ipairs(feed['events']) do
      append_feed(KEYS[feed['k'] + 2], ARGV[ev['id']], ev, ARGV[feed['run']], ev['body'] and ARGV[ev['body']],
        ev['n'], ops['retention_ms'])
    end
    fed = 1
  else
    local at = tonumber(ops['relay'])
    pending = redis.call('RPUSH', KEYS[7], unpack(ARGV, at, at + tonumber(ops['relay_n']) - 1))
    redis.call('ZADD', KEYS[8], 'NX', ops['now'], run_id)
  end
  for k, at in ipairs(ops['bodies']) do
    redis.call('SET', KEYS[8 + k], ARGV[tonumber(at)], 'PX', ops['retention_ms'])
  end
end

if ops['ttl_ms'] then
  redis.call('PEXPIRE', KEYS[1], ops['ttl_ms'])
  redis.call('PEXPIRE', KEYS[6], ops['ttl_ms'])
  if ops['result'] then redis.call('PEXPIRE', KEYS[4], ops['ttl_ms']) end
end
return {'ok', pending, status, fed}
