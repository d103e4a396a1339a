-- Compare-and-PEXPIRE: renew the lock only if every one of its keys still carries this holder's
-- token (or, for an elected leader, the token marked '~elected:', see confirm_leader.lua);
-- otherwise touch none. A key that is gone stays gone: nothing here can create one.
-- KEYS: the lock's keys (one per resource); ARGV[1] token; ARGV[2] new TTL in milliseconds;
-- ARGV[3] (an elected leader's renewal only) 'mark': a key still holding the bare token is marked
-- as it is renewed, so that a master the election's own mark missed shows the leader from the
-- next renewal on (and announces it on '<key>:elected').
-- Returns 1 if renewed, 0 if a key is absent or held by another token.
local marked = '~elected:' .. ARGV[1]
for _, key in ipairs(KEYS) do
  local value = redis.call('GET', key)
  if value ~= ARGV[1] and value ~= marked then
    return 0
  end
end
for _, key in ipairs(KEYS) do
  if ARGV[3] == 'mark' and redis.call('GET', key) == ARGV[1] then
    redis.call('SET', key, marked, 'PX', ARGV[2])
    redis.call('SPUBLISH', key .. ':elected', '')
  else
    redis.call('PEXPIRE', key, ARGV[2])
  end
end
return 1
