-- Second fencing round: raise the counter to the fence the holder was given, but only where the
-- holder's token is still present (never on behalf of a lock that has already moved on).
-- KEYS[1] lock key; KEYS[2] fence counter key; ARGV[1] token; ARGV[2] fence.
-- Returns 1 if the counter now holds at least the fence, 0 if the token is gone.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
local current = tonumber(redis.call('GET', KEYS[2]) or '0')
if current < tonumber(ARGV[2]) then
  redis.call('SET', KEYS[2], ARGV[2])
end
return 1
