-- The rollback of an owner's attempt on a master where it named a value for a takeover
-- (acquire_owned.lua, acquire_queued.lua; line.lua goes ahead of this): where the key still
-- holds this attempt's value, the value it replaced goes back, with the key's expiry (which the
-- takeover kept at least that value's own). So the lock that value belongs to holds its key
-- here as before the attempt. A waiter's attempt that still waits is put back in line.
-- KEYS[1] lock key; KEYS[2] its line; KEYS[3] its line's leases. ARGV[1] this attempt's token;
-- ARGV[2] the value it named; then, for a waiter that still waits, ARGV[3] its id, ARGV[4] its
-- order and ARGV[5] its entry lease in ms.
-- Returns 1 if the value went back, 0 if the key holds anything else (the takeover never ran,
-- or something replaced it since): nothing changes then.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
redis.call('SET', KEYS[1], ARGV[2], 'KEEPTTL')
if ARGV[5] then
  take_place(KEYS[2], KEYS[3], ARGV[3], ARGV[4], tonumber(ARGV[5]), now_ms())
end
return 1
