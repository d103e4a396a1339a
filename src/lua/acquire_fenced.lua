-- SET NX PX, and on success advance the resource's persistent fencing counter.
-- KEYS[1] lock key; KEYS[2] fence counter key; ARGV[1] token; ARGV[2] TTL in milliseconds.
-- Returns the new counter value (>= 1) if the lock was set, 0 if it is held by another token.
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return redis.call('INCR', KEYS[2])
end
return 0
