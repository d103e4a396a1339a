-- A waiter leaves the lines (line.lua goes ahead of this): it acquired, gave up or was cancelled.
-- A key reserved for it is handed to the next live waiter, or deleted when nobody else waits; a
-- line left with nobody live lets its key lapse as its holder's lease says (see settle).
-- KEYS: n lock keys, their n line keys, their n lease keys, their n records (see
-- acquire_queued.lua).
-- ARGV[1] waiter id; ARGV[2] how long a reservation lasts at most, in ms; ARGV[3] n; ARGV[4]
-- (optional) 'holding': the waiter holds the lock a release handed to it (see
-- wakeup/handed.rs), so a key handed to it is its lock, and stays.
-- Returns 1.
local n = tonumber(ARGV[3])
local me = ARGV[1]
for i = 1, n do
  local key, line, leases, held = KEYS[i], KEYS[n + i], KEYS[2 * n + i], KEYS[3 * n + i]
  redis.call('ZREM', line, me)
  redis.call('ZREM', leases, me)
  if not ARGV[4] and redis.call('GET', key) == '~queued:' .. me then
    hand_over(key, line, leases, held, tonumber(ARGV[2]), now_ms(), nil, nil)
  end
  settle(key, held, line, leases, now_ms())
end
return 1
