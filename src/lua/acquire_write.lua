-- A writer's attempt on a read-write lock: `SET NX PX` of the resource's key, granted only while
-- no reader's hold is live. A refused writer is noted in `<key>:writers` for `wait` ms, during
-- which new readers are refused: a waiting writer is not starved by a stream of readers. A writer
-- that does not wait (one attempt) leaves no note: it sends a `wait` of 1 ms or less.
-- KEYS[1] the resource's key; KEYS[2] its readers; KEYS[3] its waiting writers; KEYS[4] (fencing
-- only) its fence counter. ARGV[1] token; ARGV[2] TTL in ms; ARGV[3] the writer's id (the same
-- for every attempt of one acquire); ARGV[4] how long its waiting note lasts, in ms; ARGV[5]
-- (fencing only) how long the counter lasts after its last grant, in ms.
-- Returns 0 if refused, else the new fence counter value, or 1 without fencing.
local now = now_ms()
local function wait()
  local lease = tonumber(ARGV[4])
  if lease <= 1 then
    return 0
  end
  redis.call('ZADD', KEYS[3], now + lease, ARGV[3])
  if redis.call('PTTL', KEYS[3]) < lease then
    redis.call('PEXPIRE', KEYS[3], lease)
  end
  return 0
end
if redis.call('EXISTS', KEYS[1]) == 1 then
  return wait()
end
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
if redis.call('ZCARD', KEYS[2]) > 0 then
  return wait()
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
redis.call('ZREM', KEYS[3], ARGV[3])
if KEYS[4] then
  return next_fence(KEYS[4], ARGV[5])
end
return 1
