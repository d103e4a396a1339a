-- What one node holds for a lock key, read atomically (line.lua goes ahead of this): its value
-- (nil when absent), its PTTL in ms (-2 when absent, -1 with no expiry), the node's time in ms,
-- and the live waiters in the key's line, first to last, as {id, order, ms until the entry
-- lapses} triples.
-- Then, for a read-write lock, how many readers' holds and waiting writers' notes are live.
-- A key stretched for its line (see stretch in line.lua) is reported with its holder's lease,
-- from its record, not the stretch: it is what the holder has; once that has passed, as absent,
-- as an expired key would be.
-- KEYS[1] lock key; KEYS[2] its line; KEYS[3] the line's leases; KEYS[4] its readers; KEYS[5] its
-- waiting writers; KEYS[6] its record.
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local line = {}
local entries = redis.call('ZRANGE', KEYS[2], 0, -1, 'WITHSCORES')
for i = 1, #entries, 2 do
  local lapses = tonumber(redis.call('ZSCORE', KEYS[3], entries[i]))
  if lapses and lapses > now then
    table.insert(line, {entries[i], entries[i + 1], lapses - now})
  end
end
local readers = redis.call('ZCOUNT', KEYS[4], '(' .. now, '+inf')
local writers = redis.call('ZCOUNT', KEYS[5], '(' .. now, '+inf')
local value, pttl = redis.call('GET', KEYS[1]), redis.call('PTTL', KEYS[1])
local lease = value and record_of(KEYS[1], KEYS[6])
if lease and lease <= now then
  value, pttl = false, -2
elseif lease then
  pttl = lease - now
end
return {value, pttl, now, line, readers, writers}
