#!lua
-- Many calls of one script in one: the script (transition.lua, relay_feed.lua or relay_done.lua; see
-- scripts.BATCHED) is the function `one` here, applied to each call in turn exactly as it would be alone,
-- so one call's outcome never depends on another's. Every call's keys are in the slot of the others' on
-- a cluster (the caller groups them so); on one Redis server there are no slots.
-- KEYS: each call's KEYS in turn. ARGV: for each call in turn, its key count, its argument count, then
-- its ARGV.
-- Returns, for each call, the script's reply, or {'error', message} if it raised (its writes before the
-- error stay, as they would for the script alone).
local out = {}
local at, k = 1, 1
local i = 0
while at <= #ARGV do
  i = i + 1
  local nk, n = tonumber(ARGV[at]), tonumber(ARGV[at + 1])
  local keys, argv = {}, {}
  for j = 1, nk do keys[j] = KEYS[k + j - 1] end
  for j = 1, n do argv[j] = ARGV[at + 1 + j] end
  k = k + nk
  at = at + n + 2
  local ok, reply = pcall(one, keys, argv)
  if ok then
    out[i] = reply
  elseif type(reply) == 'table' and reply.err then
    out[i] = {'error', reply.err}
  else
    out[i] = {'error', tostring(reply)}
  end
end
return out
