-- What one master says of an election: the key's value (nil when absent) and its PTTL in ms; for
-- a key stretched for its line of candidates (see stretch in line.lua), the time left of its
-- holder's own lease, from its record; once that has passed, nothing, as for an expired key.
-- KEYS[1] the election's key; KEYS[2] its record.
local value, pttl = redis.call('GET', KEYS[1]), redis.call('PTTL', KEYS[1])
local record = value and redis.call('GET', KEYS[2])
if record then
  local token, lease, stretched = string.match(record, '^(.*)|(%d+)|(%d+)$')
  if (value == token or value == '~elected:' .. token)
      and redis.call('PEXPIRETIME', KEYS[1]) == tonumber(stretched) then
    local time = redis.call('TIME')
    local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
    if tonumber(lease) <= now then
      return {false, -2}
    end
    pttl = tonumber(lease) - now
  end
end
return {value, pttl}
