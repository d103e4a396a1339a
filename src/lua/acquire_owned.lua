-- Take a lock under an owner id (line.lua goes ahead of this): set it where the key is free and
-- nobody waits in its line, or where it holds an earlier attempt of the same owner
-- (`<32 hex digits>@<owner>`, see token.rs); advance the fencing counter on every grant when
-- fencing is on. Each attempt writes its own value, so a cleanup of an earlier attempt (a
-- compare-and-delete of that attempt's value) leaves this grant alone.
-- KEYS[1] lock key; KEYS[2] its line; KEYS[3] its line's leases; KEYS[4] (fencing only) its
-- fence counter. ARGV[1] this attempt's token; ARGV[2] TTL in ms; ARGV[3] the owner id;
-- ARGV[4] (fencing only) how long the counter lasts after its last grant, in ms.
-- Returns -1 if the key is free but others wait in its line, 0 if another value holds the key
-- (a token, another owner, a reservation), else the new fence counter value, or 1 without
-- fencing.
local value = redis.call('GET', KEYS[1])
local owner = ARGV[3]
if value and not owned_by(value, owner, ARGV[1]) then
  return 0
end
if not value and others_wait(KEYS[2], KEYS[3], now_ms()) then
  return -1
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
if KEYS[4] then
  return next_fence(KEYS[4], ARGV[4])
end
return 1
