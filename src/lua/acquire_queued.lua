-- A waiter's attempt (line.lua goes ahead of this): take its place in each key's line, or keep
-- it, and take every key if each is free and this waiter heads its line, or is reserved for it.
-- KEYS: n lock keys, their n line keys (`<key>:queue`, a sorted set of waiter ids scored by the
-- order the waiter chose), their n lease keys (`<key>:leases`, the same ids scored by the
-- master's time in ms at which the entry lapses), then (with fencing) their n fence counters.
-- ARGV[1] token; ARGV[2] TTL in ms; ARGV[3] n; ARGV[4] waiter id; ARGV[5] the waiter's order;
-- ARGV[6] entry lease in ms.
-- Returns nil if refused (the entry is in place and renewed), else the new fence counter values
-- in key order (an empty array without fencing); the entry is gone from every line then.
local n = tonumber(ARGV[3])
local me = ARGV[4]
local reserved = '~queued:' .. me
local now = now_ms()
local granted = true
for i = 1, n do
  local key, line, leases = KEYS[i], KEYS[n + i], KEYS[2 * n + i]
  drop_lapsed(line, leases, now)
  take_place(line, leases, me, ARGV[5], tonumber(ARGV[6]), now)
  local value = redis.call('GET', key)
  -- A key that holds this very token is this attempt's own (an owner id, `acquire_as`).
  if value ~= reserved and value ~= ARGV[1]
      and (value or redis.call('ZRANGE', line, 0, 0)[1] ~= me) then
    granted = false
  end
end
if not granted then
  return false
end
local fences = {}
for i = 1, n do
  redis.call('SET', KEYS[i], ARGV[1], 'PX', ARGV[2])
  redis.call('ZREM', KEYS[n + i], me)
  redis.call('ZREM', KEYS[2 * n + i], me)
  if #KEYS > 3 * n then
    fences[i] = redis.call('INCR', KEYS[3 * n + i])
  end
end
return fences
