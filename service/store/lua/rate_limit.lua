#!lua
-- KEYS[1] the limiter's key. ARGV: interval_ms, burst, mode ('take' counts the request when it may go;
-- 'peek' only answers). Returns 0 when the request may go, else how many ms until it may (_gcra.lua).
return gcra(KEYS[1], tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3] == 'take')
