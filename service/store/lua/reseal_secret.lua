#!lua
-- Replaces a subscription's stored secrets only if they are still what was read (a compare-and-set, so
-- that a re-seal never undoes a rotation that happened meanwhile).
-- KEYS[1] subscription key. ARGV: old value, new value. Returns 1 when replaced, else 0.
if redis.call('HGET', KEYS[1], 'secrets') ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[1], 'secrets', ARGV[2])
return 1
