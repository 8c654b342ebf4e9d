-- Many runs' transitions in one call: each is transition.lua (above, as the function `transition`),
-- applied in turn exactly as it would be alone, so one run's outcome never depends on another's.
-- KEYS[i] the i-th run's key. ARGV: for each run in turn, its argument count, then transition.lua's ARGV.
-- Returns, for each run, transition.lua's reply, or {'error', message} if its step raised (its writes
-- before the error stay, as they would for the script alone).
local out = {}
local at = 1
for i = 1, #KEYS do
  local n = tonumber(ARGV[at])
  local argv = {}
  for j = 1, n do argv[j] = ARGV[at + j] end
  at = at + n + 1
  local ok, reply = pcall(transition, {KEYS[i]}, argv)
  if ok then
    out[i] = reply
  elseif type(reply) == 'table' and reply.err then
    out[i] = {'error', reply.err}
  else
    out[i] = {'error', tostring(reply)}
  end
end
return out
