-- Compare-and-PEXPIRE: renew the lock only if it still carries this holder's token.
-- KEYS[1] lock key; ARGV[1] token; ARGV[2] new TTL in milliseconds.
-- Returns 1 if renewed, 0 if absent or held by another token.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
