-- Compare-and-delete: remove each key that still carries this holder's token, and leave alone
-- those that are gone or belong to another token.
-- KEYS: the lock's keys (one per resource); ARGV[1] token; ARGV[2] '1' to announce each deletion.
-- An announced deletion of KEYS[i] is published on the channel KEYS[i] .. ':released' (payload
-- '1'), which waiters subscribe to instead of polling. Rollbacks of failed attempts do not
-- announce: they would wake every waiter for a resource that is still held.
-- Returns how many keys were deleted.
local deleted = 0
for _, key in ipairs(KEYS) do
  if redis.call('GET', key) == ARGV[1] then
    redis.call('DEL', key)
    deleted = deleted + 1
    if ARGV[2] == '1' then
      redis.call('PUBLISH', key .. ':released', '1')
    end
  end
end
return deleted
