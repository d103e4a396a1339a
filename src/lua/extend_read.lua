-- Renews a reader's hold: its expiry in the readers' set moves to now + TTL, if the hold is live
-- and that is later (ZADD … GT): like extend.lua, a renewal that runs late never shortens a hold.
-- KEYS[1] the readers; ARGV[1] token; ARGV[2] TTL in ms. Returns 1 if renewed, 0 if it is gone.
local now = now_ms()
local ttl = tonumber(ARGV[2])
local expires = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not expires or tonumber(expires) <= now then
  return 0
end
redis.call('ZADD', KEYS[1], 'XX', 'GT', now + ttl, ARGV[1])
if redis.call('PTTL', KEYS[1]) < ttl then
  redis.call('PEXPIRE', KEYS[1], ttl)
end
return 1
