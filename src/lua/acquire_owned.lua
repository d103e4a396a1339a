-- Take a lock under an owner id (line.lua goes ahead of this): set it where the key is free and
-- nobody waits in its line, or take it over where it holds exactly the value `expected`, a value
-- of the same owner this attempt's client read from the key a moment before (see keys.rs,
-- `Keys::acquire_on`); advance the fencing counter on every grant when fencing is on. A takeover
-- is a compare-and-swap, so that a takeover replaces only the value it was named, whatever the
-- clocks; the client never names a value of a later attempt of its own process (token.rs,
-- `later_attempt_here`): an attempt that runs late (its request still on its way after a later
-- attempt won here) would take that grant over and then roll it back, deleting the later lock's
-- key. Each attempt writes its own value, so a cleanup of an attempt (a compare-and-delete of
-- that attempt's value) leaves every other grant alone.
-- KEYS[1] lock key; KEYS[2] its line; KEYS[3] its line's leases; KEYS[4] (fencing only) its
-- fence counter. ARGV[1] this attempt's token; ARGV[2] TTL in ms; ARGV[3] the owner id; ARGV[4]
-- the value to take over, or '' for none; ARGV[5] (fencing only) how long the counter lasts
-- after its last grant, in ms.
-- Returns -1 if the key is free but others wait in its line, 0 if another value holds the key
-- (a token, another owner, a reservation), the value itself (a string) when it is an attempt of
-- the same owner other than `expected` (the client may take it over by naming it), else the new
-- fence counter value, or 1 without fencing.
local value = redis.call('GET', KEYS[1])
if value and value ~= ARGV[4] then
  if owned_by(value, ARGV[3]) then
    return value
  end
  return 0
end
if not value and others_wait(KEYS[2], KEYS[3], now_ms()) then
  return -1
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
if KEYS[4] then
  return next_fence(KEYS[4], ARGV[5])
end
return 1
