#!lua
-- A subscription's event types change (Subscriptions.update_subscription): before its hash is written,
-- the types it asks for now join those its client's directory keeps for it (keys.client_sub_types), so
-- that what the relay reads is never narrower than the hash, whatever order two changes land in and
-- whether the hash's write then fails. A subscription with no entry (created before the directory kept
-- types) keeps none: the relay fans out to it whatever the event. An entry that is not a list (a hand
-- edit) is dropped, to the same effect.
-- KEYS: client_sub_types. ARGV: sub_id, event types (a JSON list).
-- Returns 1 when its entry was widened or already held them, 0 when it has none.
local kept = redis.call('HGET', KEYS[1], ARGV[1])
if not kept then return 0 end
local ok, out = pcall(cjson.decode, kept)
if not ok or type(out) ~= 'table' or #out == 0 then
  redis.call('HDEL', KEYS[1], ARGV[1])
  return 0
end
local seen = {}
for _, t in ipairs(out) do seen[t] = true end
for _, t in ipairs(cjson.decode(ARGV[2])) do
  if not seen[t] then seen[t] = true; table.insert(out, t) end
end
redis.call('HSET', KEYS[1], ARGV[1], cjson.encode(out))
return 1
