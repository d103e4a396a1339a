-- Compare-and-delete: remove each key that still carries this holder's token, and leave alone
-- those that are gone or belong to another token.
-- KEYS: the lock's keys (one per resource); ARGV[1] token; ARGV[2] '0' for a silent release, or
-- the release's id (a short non-secret fingerprint of the token) to announce each deletion.
-- An announced deletion of KEYS[i] is published on the channel KEYS[i] .. ':released' with the
-- release's id as payload: waiters subscribe instead of polling, and a client hearing one
-- release from several nodes tells it is one release. Rollbacks of failed attempts do not
-- announce: they would wake a waiter for a resource that is still held.
-- Returns how many keys were deleted.
local deleted = 0
for _, key in ipairs(KEYS) do
  if redis.call('GET', key) == ARGV[1] then
    redis.call('DEL', key)
    deleted = deleted + 1
    if ARGV[2] ~= '0' then
      redis.call('PUBLISH', key .. ':released', ARGV[2])
    end
  end
end
return deleted
