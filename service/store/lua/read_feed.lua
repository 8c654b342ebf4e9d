#!lua
-- Reads a client's feed after an iterator (GET /v1/events, the SSE streams): one page, filtered, with
-- the bodies the entries carry. An entry whose body is kept under the event's own key (not a key this
-- script may name: the feed's entries are data) answers `false` for it and its size counts as the size
-- the entry carries (its b in digits; 'n' in an entry written before); the caller reads those bodies (one
-- MGET) and skips an event whose body expired. Entries are stored as service/store/feedform.py says, in
-- any of its forms: the caller's filters name each (a type and its code, a run id long, short and stored,
-- a vendor and its code).
-- KEYS[1] the client's feed. ARGV: after (a stream id; '' = from the oldest kept), limit (matches at
--   most), scan (entries read at most), cutoff_ms (now - retention), types (JSON list; [] = every type;
--   'run.*' matches every run event spelled out; the caller adds the codes), run_id ('' = any),
--   vendor ('' = any), future_ms (how far past
--   Redis's clock an iterator may point), max_bytes (the page's bodies stop growing past this many bytes:
--   a page always has its first match), interval_ms and burst of the client's scan rate (KEYS[2], a GCRA
--   in entries: _gcra.lua; interval 0 = none), need (the least it reads: with less left, it reads
--   nothing): a read scans at most what the client has left of it, and is charged what it scanned
--   (at least 1); run_short and run_stored (the run id as the entries of the form before and a new one
--   store it), vendor_code (the vendor as a new entry stores it).
-- Returns {'expired'} (entries after the iterator may be gone: it is older than the retention window and
-- nothing at or before it is kept) | {'invalid'} (it points into the future) |
-- {'throttled', ms} (the client's scan rate is spent: none may be scanned for ms) |
-- {'ok', iterator, done, scanned, id1, event_id1, run_id1, body1 | false, id2, ...} (the ids as stored: the
-- run's, '' for none, unpacks a body packed against it): done = 1 when the page reached the
-- feed's end; scanned = the entries read (the caller's budget per request). The iterator at the end is pushed to the current millisecond, so that a consumer of a quiet feed
-- keeps an iterator inside the retention window: entries added later get ids past it.
local key = KEYS[1]
local after, limit, scan, cutoff = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local types = cjson.decode(ARGV[5])
local run_id, vendor, future = ARGV[6], ARGV[7], tonumber(ARGV[8])
local max_bytes = tonumber(ARGV[9])
local rate_key, interval, burst, need = KEYS[2], tonumber(ARGV[10]), tonumber(ARGV[11]), tonumber(ARGV[12])
local run_short, run_stored, vendor_code = ARGV[13], ARGV[14], ARGV[15]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

local function ms_of(id) return tonumber(string.match(id, '^(%d+)')) end

if after ~= '' then
  local ms = ms_of(after)
  if ms > now + future then return {'invalid'} end
  if ms < cutoff and #redis.call('XRANGE', key, '-', after, 'COUNT', 1) == 0 then return {'expired'} end
end

local function wanted(h)
  if run_id ~= '' and h['r'] ~= run_id and h['r'] ~= run_short and h['r'] ~= run_stored then return false end
  if vendor ~= '' and h['v'] ~= vendor and h['v'] ~= vendor_code then return false end
  if #types == 0 then return true end
  for _, ty in ipairs(types) do
    if ty == h['t'] or (ty == 'run.*' and string.sub(h['t'], 1, 4) == 'run.') then return true end
  end
  return false
end

if interval > 0 then
  local room, wait_ms = gcra_room(rate_key, interval, burst, need, now)
  if room == 0 then return {'throttled', wait_ms} end
  scan = math.min(scan, room)
end

local rows = redis.call('XRANGE', key, after == '' and '-' or ('(' .. after), '+', 'COUNT', scan)
local out = {'ok', '', 0, 0}
local last, matched, full, bytes, scanned = after, 0, false, 0, 0
for i, row in ipairs(rows) do
  last = row[1]
  scanned = i
  local f, h = row[2], {}
  for j = 1, #f, 2 do h[f[j]] = f[j + 1] end
  if wanted(h) then
    local body, size = h['b'] or false, tonumber(h['n'] or '0') or 0
    -- A body starts with '~' (packed) or '{'; digits are the size of one its event's key keeps.
    if body and string.find(body, '^%d') then body, size = false, tonumber(body) or 0 end
    table.insert(out, row[1]); table.insert(out, h['e']); table.insert(out, h['r'] or ''); table.insert(out, body)
    matched = matched + 1
    bytes = bytes + (body and #body or size)
    if matched >= limit or bytes >= max_bytes then
      full = i < #rows or #rows >= scan
      break
    end
  end
end
if not full and #rows < scan then
  out[3] = 1
  -- The feed's end: every entry added from now on gets an id past (now - 1 ms, any sequence).
  if last == '' or ms_of(last) < now then last = tostring(now - 1) .. '-18446744073709551615' end
end
out[2] = last
out[4] = scanned
if interval > 0 then gcra_charge(rate_key, interval, math.max(1, scanned), now) end
return out
