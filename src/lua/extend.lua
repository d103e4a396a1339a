-- Compare-and-PEXPIRE: renew the lock only if every one of its keys still carries this holder's
-- token (or, for an elected leader, the token marked '~elected:', see confirm_leader.lua);
-- otherwise touch none. A key that is gone stays gone: nothing here can create one.
-- A renewal never shortens a key (PEXPIRE … GT): a request that runs late, after a later and
-- longer one of the same holder (a retired connection's, a dropped extend's, a handed lock's
-- background renewal), leaves the key as that one set it. So every renewal that won proves the
-- keys of its quorum live at least its TTL from when it was sent, whatever runs after it, and a
-- holder's deadline is the latest such bound (see Lock::extend).
-- KEYS: the lock's keys (one per resource); ARGV[1] token; ARGV[2] new TTL in milliseconds;
-- ARGV[3] (an elected leader's renewal only) 'mark': a key still holding the bare token is marked
-- as it is renewed, so that a master the election's own mark missed shows the leader from the
-- next renewal on (and announces it on ARGV[4], the election's channel).
-- Returns 1 if renewed (the keys live at least the TTL from now), 0 if a key is absent or held
-- by another token.
local marked = '~elected:' .. ARGV[1]
for _, key in ipairs(KEYS) do
  local value = redis.call('GET', key)
  if value ~= ARGV[1] and value ~= marked then
    return 0
  end
end
for _, key in ipairs(KEYS) do
  if ARGV[3] == 'mark' and redis.call('GET', key) == ARGV[1] then
    redis.call('SET', key, marked, 'KEEPTTL')
    redis.call('SPUBLISH', ARGV[4], '')
  end
  redis.call('PEXPIRE', key, ARGV[2], 'GT')
end
return 1
