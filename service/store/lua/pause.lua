#!lua
-- A vendor's pause after a 429, shared by every worker (the run claim reads it: Runs.claim_runs). KEYS: pause.
-- ARGV[1] = op, ARGV[2] = now_ms, ARGV[3] = probe token ('' when the request was not the probe).
--
-- 'limited' ARGV: ..., retry_after_ms (-1: no header), floor_ms, cap_ms
--   A 429. Nothing goes to the vendor before now + wait: Retry-After, never below floor (the vendor's
--   documented minimum interval) nor above cap; without the header floor * 2^(streak-1), capped. The
--   streak grows only when the probe itself is refused, so a round of 429s answered to requests that
--   were in flight together counts once. Returns {until_ms, streak}.
-- 'answered': the probe got an answer that was not 429: the pause ends, the backlog is released.
-- 'release': the probe got no answer (or sent nothing): another run may probe.
-- 'probe' ARGV: ..., probe_exp_ms: a claim took one run as the probe (claim_runs.lua): it is the probe
--   unless the pause grew again or another probe is out meanwhile. Returns 1 (it is the probe), 2 (the
--   pause is over: it goes as any run) or 0 (refused: the caller hands the run back).
local op, now, token = ARGV[1], tonumber(ARGV[2]), ARGV[3]
local p = redis.call('HMGET', KEYS[1], 'until', 'streak', 'probe', 'probe_exp')
if op == 'probe' then
  if not p[1] then return 2 end
  if now < tonumber(p[1]) or (p[3] and tonumber(p[4] or '0') > now) then return 0 end
  redis.call('HSET', KEYS[1], 'probe', token, 'probe_exp', ARGV[4])
  return 1
end
local is_probe = token ~= '' and p[3] == token
if op == 'limited' then
  local retry_after, floor, cap = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
  local streak = tonumber(p[2] or '0')
  if not p[1] or streak == 0 then
    streak = 1
  elseif is_probe then
    streak = streak + 1
  end
  local wait
  if retry_after >= 0 then
    wait = math.min(math.max(retry_after, floor), cap)
  else
    wait = math.min(floor * 2 ^ math.min(streak - 1, 40), cap)
  end
  local untl = math.max(tonumber(p[1] or '0'), now + wait)
  redis.call('HSET', KEYS[1], 'until', tostring(untl), 'streak', tostring(streak))
  if is_probe then redis.call('HDEL', KEYS[1], 'probe', 'probe_exp') end
  -- A pause nobody resolves (every worker gone) is forgotten an hour after it ends.
  redis.call('PEXPIRE', KEYS[1], math.floor(untl - now) + 3600000)
  return {tostring(untl), streak}
end
if not is_probe then return 0 end
if op == 'answered' then
  redis.call('DEL', KEYS[1])
else
  redis.call('HDEL', KEYS[1], 'probe', 'probe_exp')
end
return 1
