-- All or nothing (line.lua goes ahead of this): SET NX PX every key, or none if any of them exists
-- or has others waiting in its line (a key held past its holder's lease only for a line that has
-- nobody live left, see stretch in line.lua, is free). With fencing, also advance each key's
-- fencing counter (see next_fence in line.lua).
-- KEYS: n lock keys, their n lines, their n lines' leases and their n records (see
-- acquire_queued.lua), then (with fencing) their n fence counter keys; ARGV[1] token; ARGV[2] TTL
-- in milliseconds; ARGV[3] n; ARGV[4] (fencing only) how long a counter lasts after its last grant,
-- in ms.
-- Returns -1 if others wait for a key, nil if any key is held (nothing was set in either case),
-- else the new counter values in key order (an empty array without fencing).
local n = tonumber(ARGV[3])
local now = now_ms()
for i = 1, n do
  if others_wait(KEYS[n + i], KEYS[2 * n + i], now) then
    return -1
  end
end
for i = 1, n do
  if redis.call('EXISTS', KEYS[i]) == 1 and not lapsed(KEYS[i], KEYS[3 * n + i], now) then
    return false
  end
end
local fences = {}
for i = 1, n do
  redis.call('SET', KEYS[i], ARGV[1], 'PX', ARGV[2])
  redis.call('DEL', KEYS[3 * n + i])
  if #KEYS > 4 * n then
    fences[i] = next_fence(KEYS[4 * n + i], ARGV[4])
  end
end
return fences
