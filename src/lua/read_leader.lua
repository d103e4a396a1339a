-- What one master says of an election: the key's value (nil when absent) and its PTTL in ms.
-- KEYS[1] the election's key.
return {redis.call('GET', KEYS[1]), redis.call('PTTL', KEYS[1])}
