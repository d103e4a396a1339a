-- A waiter leaves the lines: it acquired, gave up or was cancelled. A key reserved for it is
-- handed to the next live waiter, or deleted when nobody else waits.
-- KEYS: n lock keys, their n line keys, their n lease keys (see acquire_queued.lua).
-- ARGV[1] waiter id; ARGV[2] how long a reservation lasts, in ms; ARGV[3] n.
-- Returns 1.
local n = tonumber(ARGV[3])
local me = ARGV[1]
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
for i = 1, n do
  local key, line, leases = KEYS[i], KEYS[n + i], KEYS[2 * n + i]
  redis.call('ZREM', line, me)
  redis.call('ZREM', leases, me)
  if redis.call('GET', key) == '~queued:' .. me then
    local lapsed = redis.call('ZRANGE', leases, '-inf', now, 'BYSCORE')
    if #lapsed > 0 then
      redis.call('ZREM', line, unpack(lapsed))
      redis.call('ZREM', leases, unpack(lapsed))
    end
    local head = redis.call('ZRANGE', line, 0, 0)[1]
    if head then
      -- Reserved no longer than the head's entry lives: a dead head blocks its line for no
      -- longer than its entry lease.
      local lapses = tonumber(redis.call('ZSCORE', leases, head)) or now
      local reserve = math.max(1, math.min(tonumber(ARGV[2]), lapses - now))
      redis.call('SET', key, '~queued:' .. head, 'PX', reserve)
      redis.call('PUBLISH', key .. ':released', head)
    else
      redis.call('DEL', key)
    end
  end
end
return 1
