#!lua
-- Many calls of one script in one: the script (transition.lua, relay_feed.lua or relay_done.lua; see
-- scripts.BATCHED) is the function `one` here, applied to each call in turn exactly as it would be alone,
-- so one call's outcome never depends on another's. Every call's keys are in the slot of the others' on
-- a cluster (the caller groups them so); on one Redis server there are no slots.
-- KEYS: each call's KEYS in turn. ARGV: for each call in turn, its key count, its argument count, then
-- its ARGV.
-- Returns, for each call, the script's reply, or {'error', message} if it raised (its writes before the
-- error stay, as they would for the script alone).
-- count items of t from its from-th: a table made whole from the stack (a third of the time of one filled
-- an item at a time), but for a call of more items than Lua's stack takes at once (LUAI_MAXCSTACK, 8000).
local function slice(t, from, count)
  if count <= 4000 then return {unpack(t, from, from + count - 1)} end
  local items = {}
  for j = 1, count do items[j] = t[from + j - 1] end
  return items
end

local out = {}
local at, k = 1, 1
local i = 0
while at <= #ARGV do
  i = i + 1
  local nk, n = tonumber(ARGV[at]), tonumber(ARGV[at + 1])
  local keys, argv = slice(KEYS, k, nk), slice(ARGV, at + 2, n)
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
