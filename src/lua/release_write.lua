-- Compare-and-delete of a writer's hold on a read-write lock, announced on the lock's channel:
-- the readers and writers waiting for it attempt at once (see rwlock.rs). The writer's waiting
-- note goes too, on every master: on one that refused its winning attempt it would otherwise
-- hold new readers back there for its whole lease. A writer never waits in the mutex's line, so
-- there is nobody to hand the key to.
-- KEYS[1] the resource's key; KEYS[2] its waiting writers; ARGV[1] token; ARGV[2] the channel;
-- ARGV[3] the writer's id. Returns 1 if released, 0 if the key is gone or another token's.
redis.call('ZREM', KEYS[2], ARGV[3])
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
redis.call('DEL', KEYS[1])
redis.call('SPUBLISH', ARGV[2], '')
return 1
