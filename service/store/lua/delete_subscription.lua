#!lua
-- Deletes a subscription and its entry in the client's directory, in one step (a MULTI would do on one
-- Redis, but a cluster client refuses transactions).
-- KEYS: subscription, client_subs. ARGV: sub_id.
redis.call('DEL', KEYS[1])
redis.call('ZREM', KEYS[2], ARGV[1])
return 1
