-- Compare-and-PEXPIRE: renew the lock only if every one of its keys still carries this holder's
-- token (or, for an elected leader, the token marked '~elected:', see confirm_leader.lua);
-- otherwise touch none. A key that is gone stays gone: nothing here can create one.
-- KEYS: the lock's keys (one per resource); ARGV[1] token; ARGV[2] new TTL in milliseconds.
-- Returns 1 if renewed, 0 if a key is absent or held by another token.
for _, key in ipairs(KEYS) do
  local value = redis.call('GET', key)
  if value ~= ARGV[1] and value ~= '~elected:' .. ARGV[1] then
    return 0
  end
end
for _, key in ipairs(KEYS) do
  redis.call('PEXPIRE', key, ARGV[2])
end
return 1
