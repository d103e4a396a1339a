-- Compare-and-delete, with the hand-off to the line: each key that still carries this holder's
-- token (or, for an elected leader, the token marked '~elected:', see confirm_leader.lua) is handed
-- to the first live waiter in its line, or deleted when nobody waits. Keys that are gone or belong
-- to another token are left alone.
-- KEYS: n lock keys, their n line keys, their n lease keys, their n records (see
-- acquire_queued.lua), then (under an owner id, one key) its takeovers: a release that finds its
-- key taken over notes its value released there (released_under in line.lua), and one that releases
-- its key drops its own note. ARGV[1] token; ARGV[2] how long a reservation lasts at most, in ms;
-- ARGV[3] n; then, for the cleanup of a waiter's failed attempt, ARGV[4] its id (a key handed back
-- to it is reserved quietly: it knows, and a wake-up would make it attempt again at once against
-- the same holder), and for its rollback while it still waits, ARGV[5] its order and ARGV[6] its
-- entry lease in ms: it is put back in each line first, so that it keeps its place.
-- Returns how many keys were released.
-- The mutex's own path comes first, ahead of the line's helpers: one key and nobody in its line.
-- Still this token's, it is deleted; gone or another token's (say, this token's own SET was
-- refused here, where the holder's previous lock was released only after it), it is left alone:
-- the long way would do nothing more, and costs the master the helpers' definitions. An elected
-- leader's mark, a takeover's note (an owner id's fifth key) on a key not this token's, a line
-- and a rollback take the long way.
-- `lined`: whether that one key's line exists, as this path found it (nil when it did not look);
-- the long way then does not ask again. A line it found may be gone by the hand-off (the
-- holder's own entry taken out below): hand_over then finds nobody, and deletes the key.
local lined
if ARGV[3] == '1' and not ARGV[4] then
  lined = redis.call('EXISTS', KEYS[2]) == 1
  if not lined then
    local value = redis.call('GET', KEYS[1])
    if value == ARGV[1] then
      redis.call('DEL', KEYS[1])
      if KEYS[5] then
        -- An owner's takeover that won and is released: its note is no way back any more.
        redis.call('HDEL', KEYS[5], ARGV[1])
      end
      return 1
    end
    if not KEYS[5] and value ~= '~elected:' .. ARGV[1] then
      return 0
    end
  end
end
--@line
local n = tonumber(ARGV[3])
local took = KEYS[4 * n + 1]
local released = 0
-- The holder of a lock handed to it (see wakeup/handed.rs) is done with every line of its keys:
-- where the key is not (or not yet) its own, it may still stand in line, and a release that
-- arrives after this one must not hand it a lock it no longer wants.
local handed = string.sub(ARGV[1], 1, 8) == '~queued:' and string.sub(ARGV[1], 9)
for i = 1, n do
  local key, line, leases, held = KEYS[i], KEYS[n + i], KEYS[2 * n + i], KEYS[3 * n + i]
  local value = redis.call('GET', key)
  -- (Mostly it is not in line any more: the hand-off took it out, unless it was a quiet one.)
  if handed and redis.call('ZSCORE', line, handed) then
    redis.call('ZREM', line, handed)
    redis.call('ZREM', leases, handed)
  end
  if value == ARGV[1] or value == '~elected:' .. ARGV[1] then
    released = released + 1
    if value ~= ARGV[1] then
      -- An elected leader steps down: its observers read who leads now (see election.rs).
      redis.call('SPUBLISH', channel_base(line) .. ':elected', '')
    end
    if ARGV[4] or lined or (lined == nil and redis.call('EXISTS', line) == 1) then
      local now = now_ms()
      if ARGV[5] then
        take_place(line, leases, ARGV[4], ARGV[5], tonumber(ARGV[6]), now)
      end
      hand_over(key, line, leases, held, tonumber(ARGV[2]), now, ARGV[4], nil)
    else
      redis.call('DEL', key)
      redis.call('DEL', held)
    end
    if took then
      redis.call('HDEL', took, ARGV[1])
    end
  elseif took and value then
    released_under(took, ARGV[1])
  end
end
return released
