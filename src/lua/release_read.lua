-- Ends a reader's hold. KEYS[1] the readers; ARGV[1] token. Returns 1 if it was there, else 0.
return redis.call('ZREM', KEYS[1], ARGV[1])
