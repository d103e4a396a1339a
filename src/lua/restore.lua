-- The rollback of an owner's attempt on a master where it named a value for a takeover
-- (acquire_owned.lua, acquire_queued.lua; line.lua goes ahead of this), by what the takeover
-- noted (take_over in line.lua). Where the key still holds this attempt's value, the value it
-- replaced goes back, with the key's expiry (at least that value's own), so that the lock it
-- belongs to holds its key here as before the attempt; a value released meanwhile (noted '',
-- see released_under) is released now instead: the key is deleted, or handed to its line. Where
-- another attempt took the key from this one since, that attempt's note now names what this one
-- replaced, so that its own rollback puts that back. A waiter's attempt that still waits is put
-- back in line. Without a note the takeover has not run here (its request is late, or never
-- arrives): it is marked undone, so that it takes nothing when it lands (acquire_owned.lua),
-- for as long as the attempt's TTL.
-- KEYS[1] lock key; KEYS[2] its line; KEYS[3] its line's leases; KEYS[4] its takeovers; KEYS[5]
-- its record (see stretch in line.lua). ARGV[1]
-- this attempt's token; ARGV[2] how long a reservation lasts at most, in ms; ARGV[3] the
-- attempt's TTL in ms; then, for a waiter that still waits, ARGV[4] its id, ARGV[5] its order
-- and ARGV[6] its entry lease in ms.
-- Returns 1 if the key went back (or was released), else 0.
local key, line, leases, took, held, me = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], ARGV[1]
local replaced = redis.call('HGET', took, me)
if replaced == '~undone' then
  return 0
end
if not replaced then
  redis.call('HSET', took, me, '~undone')
  expire_no_sooner(took, now_ms() + tonumber(ARGV[3]))
  return 0
end
redis.call('HDEL', took, me)
if redis.call('GET', key) ~= me then
  local notes = redis.call('HGETALL', took)
  for i = 1, #notes, 2 do
    if notes[i + 1] == me then
      redis.call('HSET', took, notes[i], replaced)
    end
  end
  return 0
end
local now = now_ms()
if ARGV[6] then
  take_place(line, leases, ARGV[4], ARGV[5], tonumber(ARGV[6]), now)
end
if replaced ~= '' then
  -- A key stretched for its line: its record goes back to the value too.
  local lease, stretched = record_of(key, held)
  redis.call('SET', key, replaced, 'KEEPTTL')
  if lease then
    local record = replaced .. '|' .. string.format('%d|%d', lease, stretched)
    redis.call('SET', held, record, 'KEEPTTL')
  end
  stretch(key, held, line, now)
elseif redis.call('EXISTS', line) == 1 then
  hand_over(key, line, leases, held, tonumber(ARGV[2]), now, ARGV[4], nil)
else
  redis.call('DEL', key)
end
return 1
