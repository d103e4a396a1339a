-- Second fencing round: raise each counter to the fence the holder was given, but only where the
-- holder's token (marked or not as an elected leader's) is still present on every key (never on
-- behalf of a lock that has moved on). A raised counter lasts `grace` ms, as after a grant.
-- KEYS: n lock keys, then their n fence counter keys; ARGV[1] token; ARGV[2] how long a counter
-- lasts, in ms; ARGV[2 + i] fence of key i.
-- Returns 1 if every counter now holds at least its fence, 0 if the token is gone.
local n = #KEYS / 2
for i = 1, n do
  local value = redis.call('GET', KEYS[i])
  if value ~= ARGV[1] and value ~= '~elected:' .. ARGV[1] then
    return 0
  end
end
for i = 1, n do
  local current = tonumber(redis.call('GET', KEYS[n + i]) or '0')
  local fence = math.max(current, tonumber(ARGV[2 + i]))
  redis.call('SET', KEYS[n + i], string.format('%d', fence), 'PX', ARGV[2])
end
return 1
