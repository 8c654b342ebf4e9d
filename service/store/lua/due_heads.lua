#!lua flags=no-writes
-- Each due set's head: a worker's look at every shard of its due sets (its vendors' runs together, or
-- the deliveries), once per WORKER_IDLE_S, in one call on a Redis server. A ZRANGE each cost the worker
-- more than the look costs Redis (an idle worker read 2,350 heads a second: docs/performance.md, stop
-- 54). A read only, declared so on its first line and called as EVALSHA_RO: no WAIT behind it in the
-- durable mode. On a cluster, whose slots one call cannot span, the caller sends a ZRANGE a key.
-- KEYS: the due sets. ARGV: none.
-- Returns for each key in turn its lowest score (as Redis writes it) or false when it is empty.
local out = {}
for i = 1, #KEYS do
  out[i] = redis.call('ZRANGE', KEYS[i], '0', '0', 'WITHSCORES')[2] or false
end
return out
