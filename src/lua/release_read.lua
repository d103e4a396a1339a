-- Ends a reader's hold. When it was the last live reader and a writer waits, announces on the
-- lock's channel that the readers are gone: the waiting writers attempt at once (see rwlock.rs).
-- KEYS[1] the readers; KEYS[2] the waiting writers; ARGV[1] token; ARGV[2] the channel.
-- Returns 1 if it was there, else 0.
local removed = redis.call('ZREM', KEYS[1], ARGV[1])
if removed == 1 then
  local now = now_ms()
  if redis.call('ZCOUNT', KEYS[1], '(' .. now, '+inf') == 0
      and redis.call('ZCOUNT', KEYS[2], '(' .. now, '+inf') > 0 then
    redis.call('SPUBLISH', ARGV[2], '')
  end
end
return removed
