-- A reader's attempt on a read-write lock: refused while a writer holds the resource's key or a
-- writer waits for it; otherwise the reader's token joins `<key>:readers`, scored by the instant
-- (the master's clock, in ms) its hold expires.
-- KEYS[1] the resource's key (its writer); KEYS[2] its readers; KEYS[3] its waiting writers.
-- ARGV[1] token; ARGV[2] TTL in ms. Returns 1 if granted, 0 if refused.
local now = now_ms()
local ttl = tonumber(ARGV[2])
if redis.call('EXISTS', KEYS[1]) == 1 then
  return 0
end
redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now)
if redis.call('ZCARD', KEYS[3]) > 0 then
  return 0
end
redis.call('ZADD', KEYS[2], now + ttl, ARGV[1])
if redis.call('PTTL', KEYS[2]) < ttl then
  redis.call('PEXPIRE', KEYS[2], ttl)
end
return 1
