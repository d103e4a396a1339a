-- What one master says of an election (line.lua goes ahead of this): the key's value (nil when
-- absent) and its PTTL in ms; for a key stretched for its line of candidates (see stretch in
-- line.lua), the time left of its holder's own lease, from its record; once that has passed,
-- nothing, as for an expired key.
-- KEYS[1] the election's key; KEYS[2] its record.
local value, pttl = redis.call('GET', KEYS[1]), redis.call('PTTL', KEYS[1])
local lease = value and record_of(KEYS[1], KEYS[2])
if lease then
  local now = now_ms()
  if lease <= now then
    return {false, -2}
  end
  pttl = lease - now
end
return {value, pttl}
