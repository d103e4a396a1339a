-- All or nothing: SET NX PX every key, or none if any of them exists. With fencing, also INCR
-- each key's persistent fencing counter.
-- KEYS: n lock keys, then (with fencing) their n fence counter keys; ARGV[1] token; ARGV[2] TTL
-- in milliseconds; ARGV[3] n.
-- Returns nil if any key is held (nothing was set), else the new counter values in key order
-- (an empty array without fencing).
local n = tonumber(ARGV[3])
for i = 1, n do
  if redis.call('EXISTS', KEYS[i]) == 1 then
    return false
  end
end
local fences = {}
for i = 1, n do
  redis.call('SET', KEYS[i], ARGV[1], 'PX', ARGV[2])
  if #KEYS > n then
    fences[i] = redis.call('INCR', KEYS[n + i])
  end
end
return fences
