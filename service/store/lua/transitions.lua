#!lua
-- Many runs' transitions in one call: each is transition.lua (above, as the function `transition`),
-- applied in turn exactly as it would be alone, so one run's outcome never depends on another's.
-- KEYS: each run's transition.lua KEYS in turn. ARGV: for each run in turn, its key count, its argument
-- count, then transition.lua's ARGV.
-- Returns, for each run, transition.lua's reply, or {'error', message} if its step raised (its writes
-- before the error stay, as they would for the script alone).
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
  local ok, reply = pcall(transition, keys, argv)
  if ok then
    out[i] = reply
  elseif type(reply) == 'table' and reply.err then
    out[i] = {'error', reply.err}
  else
    out[i] = {'error', tostring(reply)}
  end
end
return out
