-- A plain attempt: SET NX PX, unless others wait in the key's line; with fencing, a grant
-- advances the resource's fencing counter (see next_fence in line.lua).
-- KEYS[1] lock key; KEYS[2] its line; KEYS[3] its line's leases (see acquire_queued.lua);
-- KEYS[4] (fencing only) its fence counter. ARGV[1] token; ARGV[2] TTL in ms; ARGV[3] (fencing
-- only) how long the counter lasts after its last grant, in ms.
-- Returns -1 if refused because others wait in line, 0 if the key is held (or reserved), else
-- the new counter value with fencing, 1 without.
-- The mutex's own path comes first, ahead of the line's helpers (which cost the master more to
-- set up than this whole path): no fencing and no line, so nobody waits.
if not KEYS[4] and redis.call('EXISTS', KEYS[2]) == 0 then
  if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
    return 1
  end
  return 0
end
--@line
if others_wait(KEYS[2], KEYS[3], now_ms()) then
  return -1
end
if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return 0
end
if KEYS[4] then
  return next_fence(KEYS[4], ARGV[3])
end
return 1
