-- What one node holds for a lock key: its value (nil when absent) and its remaining PTTL in
-- milliseconds (-2 when absent, -1 when it has no expiry), read atomically.
-- KEYS[1] lock key.
return {redis.call('GET', KEYS[1]), redis.call('PTTL', KEYS[1])}
