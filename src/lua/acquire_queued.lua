-- A waiter's attempt (line.lua goes ahead of this): take its place in each key's line, or keep
-- it, and take every key if each is free and this waiter heads its line, or is reserved for it.
-- KEYS: n lock keys, their n line keys (`<key>:queue`, a sorted set of waiter ids scored by the
-- order the waiter chose), their n lease keys (`<key>:leases`, the same ids scored by the
-- master's time in ms at which the entry lapses), their n records (`<key>:held`, see stretch in
-- line.lua), then (under an owner id, one key) its takeovers (see take_over in line.lua), then
-- (with fencing) their n fence counters.
-- ARGV[1] token; ARGV[2] TTL in ms; ARGV[3] n; ARGV[4] waiter id; ARGV[5] the waiter's order;
-- ARGV[6] entry lease in ms; ARGV[7] how long a fence counter lasts after its last grant, in ms
-- (ignored without fencing); ARGV[8] (under an owner id only, one key) the owner; ARGV[9] the value
-- of an earlier attempt of the owner to take over, or '' for none. A key holding another attempt
-- of the owner is taken over only when named exactly, and a request that names a value takes
-- nothing else, nor a value stamped after it (compare-and-swap, as in acquire_owned.lua, whose
-- rollback restore.lua is);
-- unnamed, it is refused with {-3, now, value}, and the client may name it in its next request.
-- Returns, when refused, {-3, now, value} for a key of the owner's (see ARGV[9]), {-2, now} while
-- another token holds a key, {-1, now} when refused only
-- for the line (a key free or handed to another waiter), `now` being the master's time in ms
-- (the entry is in place and renewed either way: the waiter learns when its entry lapses, in
-- its own clock, to bound a lock handed to it, see wakeup/handed.rs); else the new fence
-- counter values in key order (an empty array without fencing), and the entry is gone from
-- every line.
-- A waiter refused for one key passes on every other key it could have taken (reserved for it,
-- or free while it heads that line) to the next waiter there: a head that cannot use what it is
-- handed (a lock over several keys, one of them held elsewhere) must not hold up a line.
local n = tonumber(ARGV[3])
local me = ARGV[4]
local reserved = '~queued:' .. me
local now = now_ms()
local owner, expected = ARGV[8], ARGV[9]
local naming = expected ~= nil and expected ~= ''
-- The fence counters come after the keys, lines, leases, records and (under an owner id)
-- takeovers.
local took = KEYS[4 * n + 1]
local fences_after = 4 * n + (owner and 1 or 0)
local granted, taken, yours = true, false, nil
local mine = {}
for i = 1, n do
  local key, line, leases, record = KEYS[i], KEYS[n + i], KEYS[2 * n + i], KEYS[3 * n + i]
  drop_lapsed(line, leases, now)
  take_place(line, leases, me, ARGV[5], tonumber(ARGV[6]), now)
  local value = redis.call('GET', key)
  if value and lapsed(key, record, now) then
    -- Held past its holder's lease, kept only for the line: as good as expired.
    value = nil
  end
  if naming then
    -- A takeover's request: the value it named, or nothing (see acquire_owned.lua).
    if value == expected and not undone(took, ARGV[1]) and later(ARGV[1], value) then
      mine[#mine + 1] = i
    else
      granted = false
      taken = true
    end
  elseif value == reserved or (not value and redis.call('ZRANGE', line, 0, 0)[1] == me) then
    mine[#mine + 1] = i
  else
    granted = false
    taken = taken or (value and string.sub(value, 1, 8) ~= '~queued:')
    if value and owned_by(value, owner) then
      yours = value
    end
  end
end
if not granted then
  local reserve = math.min(tonumber(ARGV[6]), tonumber(ARGV[2]))
  for _, i in ipairs(mine) do
    hand_over(KEYS[i], KEYS[n + i], KEYS[2 * n + i], KEYS[3 * n + i], reserve, now, nil, me)
  end
  for i = 1, n do
    stretch(KEYS[i], KEYS[3 * n + i], KEYS[n + i], now)
  end
  if yours and n == 1 then
    return {-3, now, yours}
  end
  if taken then
    return {-2, now}
  end
  return {-1, now}
end
local fences = {}
for i = 1, n do
  local key, line, record = KEYS[i], KEYS[n + i], KEYS[3 * n + i]
  redis.call('ZREM', line, me)
  redis.call('ZREM', KEYS[2 * n + i], me)
  if naming then
    take_over(key, took, ARGV[1], ARGV[2], record)
    stretch(key, record, line, now)
  else
    write_for_line(key, record, line, ARGV[1], now + tonumber(ARGV[2]), now)
  end
  if #KEYS > fences_after then
    fences[i] = next_fence(KEYS[fences_after + i], ARGV[7])
  end
end
return fences
