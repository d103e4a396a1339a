-- Compare-and-delete, with the hand-off to the line: each key that still carries this holder's
-- token is handed to the first live waiter in its line (reserved for it, and its id published on
-- `<key>:released`), or deleted when nobody waits. Keys that are gone or belong to another token
-- are left alone.
-- KEYS: n lock keys, their n line keys, their n lease keys (see acquire_queued.lua).
-- ARGV[1] token; ARGV[2] how long a reservation lasts, in ms; ARGV[3] n; then, for the rollback
-- of a waiter's failed attempt, ARGV[4] its id, ARGV[5] its order and ARGV[6] its entry lease in
-- ms: it is put back in each line first, so that it keeps its place.
-- A reservation is a value no token can equal: `SET NX` refuses it like any held key, compare
-- scripts never match it, and only the named waiter's attempt takes it over.
-- Returns how many keys were released.
local n = tonumber(ARGV[3])
local released = 0
local now = nil
for i = 1, n do
  local key, line, leases = KEYS[i], KEYS[n + i], KEYS[2 * n + i]
  if redis.call('GET', key) == ARGV[1] then
    released = released + 1
    local head = nil
    if ARGV[4] or redis.call('EXISTS', line) == 1 then
      if not now then
        local time = redis.call('TIME')
        now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
      end
      if ARGV[4] then
        redis.call('ZADD', line, ARGV[5], ARGV[4])
        redis.call('ZADD', leases, now + tonumber(ARGV[6]), ARGV[4])
        if redis.call('PTTL', line) < tonumber(ARGV[6]) then
          redis.call('PEXPIRE', line, ARGV[6])
          redis.call('PEXPIRE', leases, ARGV[6])
        end
      end
      local lapsed = redis.call('ZRANGE', leases, '-inf', now, 'BYSCORE')
      if #lapsed > 0 then
        redis.call('ZREM', line, unpack(lapsed))
        redis.call('ZREM', leases, unpack(lapsed))
      end
      head = redis.call('ZRANGE', line, 0, 0)[1]
    end
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
return released
