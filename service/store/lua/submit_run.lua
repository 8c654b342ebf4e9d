#!lua
-- A submit on one Redis server (standalone or Sentinel; never a cluster, whose slots the two steps
-- straddle): accept_run.lua, then create_run.lua, as one script, so that a submit under a rate is one round
-- trip where it is two on a cluster (store/runs.py, Runs.create_run). Each step is its own file, as
-- a function here (scripts.py), given its own KEYS and ARGV.
-- KEYS: accept_run's, then create_run's. ARGV: how many of KEYS are accept_run's, how many of the ARGV
--   after these two are accept_run's, then accept_run's ARGV, then create_run's.
-- Returns accept_run's refusal ({'rate_limited', wait_ms}: nothing written), else create_run's answer.
local nkeys, nargs = tonumber(ARGV[1]), tonumber(ARGV[2])
local accept_keys, create_keys, accept_args, create_args = {}, {}, {}, {}
for i = 1, #KEYS do
  if i <= nkeys then accept_keys[#accept_keys + 1] = KEYS[i] else create_keys[#create_keys + 1] = KEYS[i] end
end
for i = 3, #ARGV do
  if i - 2 <= nargs then accept_args[#accept_args + 1] = ARGV[i] else create_args[#create_args + 1] = ARGV[i] end
end
local accepted = accept_run(accept_keys, accept_args)
if accepted[1] ~= 'ok' then return accepted end
return create_run(create_keys, create_args)
