-- Take a lock under an owner id (line.lua goes ahead of this): set it where the key is free and
-- nobody waits in its line, or take it over where it holds exactly the value `expected`, a value of
-- the same owner this attempt's client read from the key a moment before (see keys.rs,
-- `owner_attempt`); advance the fencing counter on every grant when fencing is on. A takeover is a
-- compare-and-swap of the value named, and only of it: a key gone since is refused, not set; so is
-- a takeover whose attempt was rolled back here already (it ran late, see restore.lua), and one
-- of a value stamped after this attempt (see `later`): of two attempts of the owner racing, the
-- one stamped later keeps every key it won, whichever lands first. It notes
-- what it replaced (take_over in line.lua), so that a rollback of the attempt (restore.lua) puts
-- that value back, with at least the life it had: a failed or cancelled attempt costs the lock it
-- took the key from nothing. Each attempt writes its own value, so a cleanup of an attempt (which
-- compares that whole value) leaves every other grant alone. A key held past its holder's lease
-- only for its line (see stretch) counts as gone.
-- KEYS[1] lock key; KEYS[2] its line; KEYS[3] its line's leases; KEYS[4] its record (see stretch);
-- KEYS[5] its takeovers (see take_over); KEYS[6] (fencing only) its fence counter. ARGV[1] this
-- attempt's token; ARGV[2] TTL in ms; ARGV[3] the owner id; ARGV[4] the value to take over, or ''
-- for none; ARGV[5] (fencing only) how long the counter lasts after its last grant, in ms.
-- Returns -1 if the key is free but others wait in its line, 0 if another value holds the key (a
-- token, another owner, a reservation) or a takeover finds the key gone, the value itself (a
-- string) when it is an attempt of the same owner other than `expected` (the client may take it
-- over by naming it), else the new fence counter value, or 1 without fencing.
local now = now_ms()
local value = redis.call('GET', KEYS[1])
if value and lapsed(KEYS[1], KEYS[4], now) then
  value = nil
end
if ARGV[4] == '' or value ~= ARGV[4] then
  if value and owned_by(value, ARGV[3]) then
    return value
  end
  if value or ARGV[4] ~= '' then
    return 0
  end
  if others_wait(KEYS[2], KEYS[3], now) then
    return -1
  end
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  redis.call('DEL', KEYS[4])
elseif undone(KEYS[5], ARGV[1]) or not later(ARGV[1], value) then
  return 0
else
  take_over(KEYS[1], KEYS[5], ARGV[1], ARGV[2], KEYS[4])
  stretch(KEYS[1], KEYS[4], KEYS[2], now)
end
if KEYS[6] then
  return next_fence(KEYS[6], ARGV[5])
end
return 1
