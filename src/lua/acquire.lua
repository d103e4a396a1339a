-- A plain attempt: SET NX PX, unless others wait in the key's line; with fencing, a grant
-- advances the resource's fencing counter (see next_fence in line.lua). A key held past its
-- holder's lease only for a line (see stretch in line.lua) is free when nobody live waits. The
-- plain mutex's first attempt is a bare SET NX PX instead (keys.rs); this script is its retry.
-- KEYS[1] lock key; KEYS[2] its line; KEYS[3] its line's leases (see acquire_queued.lua);
-- KEYS[4] its record (see stretch); KEYS[5] (fencing only) its fence counter. ARGV[1] token;
-- ARGV[2] TTL in ms; ARGV[3] (fencing only) how long the counter lasts after its last grant, in
-- ms.
-- Returns -1 if refused because others wait in line, 0 if the key is held (or reserved), else
-- the new counter value with fencing, 1 without.
-- The mutex's own path comes first, ahead of the line's helpers (which cost the master more to
-- set up than this whole path): no fencing and no line, so nobody waits.
if not KEYS[5] and redis.call('EXISTS', KEYS[2]) == 0 then
  if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
    return 1
  end
  if redis.call('EXISTS', KEYS[4]) == 0 then
    return 0
  end
end
--@line
local now = now_ms()
if others_wait(KEYS[2], KEYS[3], now) then
  return -1
end
if lapsed(KEYS[1], KEYS[4], now) then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  redis.call('DEL', KEYS[4])
elseif not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return 0
end
if KEYS[5] then
  return next_fence(KEYS[5], ARGV[3])
end
return 1
