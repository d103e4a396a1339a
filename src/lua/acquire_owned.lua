-- Take a lock under an owner id: set it where the key is free, or only renew its expiry where
-- it already holds this owner's id; advance the fencing counter on every grant when fencing is on.
-- KEYS[1] lock key; KEYS[2] (fencing only) its fence counter; ARGV[1] owner id; ARGV[2] TTL in ms.
-- Returns 0 if another value holds the key (a token, another owner, a reservation), else the new
-- fence counter value, or 1 without fencing.
local value = redis.call('GET', KEYS[1])
if value and value ~= ARGV[1] then
  return 0
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
if KEYS[2] then
  return redis.call('INCR', KEYS[2])
end
return 1
