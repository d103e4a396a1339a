-- Compare-and-PEXPIRE: renew the lock only if every one of its keys still carries this holder's
-- token (or, for an elected leader, the token marked '~elected:', see confirm_leader.lua);
-- otherwise touch none. A key that is gone stays gone: nothing here can create one.
-- A renewal never shortens a key (PEXPIRE … GT): a request that runs late, after a later and
-- longer one of the same holder (a retired connection's, a dropped extend's, a handed lock's
-- background renewal), leaves the key as that one set it. So every renewal that won proves the
-- keys of its quorum live at least its TTL from when it was sent, whatever runs after it, and a
-- holder's deadline is the latest such bound (see Lock::extend).
-- A key stretched for its line (see stretch in line.lua) lives on past its holder's lease, which
-- its record keeps: a holder whose lease there has passed is refused, as if the key had expired
-- (the head of the line may take it any moment); else the record's lease is renewed the same
-- way, never shortened.
-- KEYS: the lock's keys (one per resource), then, for keys that wait in line, their records
-- (`<key>:held`); ARGV[1] token; ARGV[2] new TTL in milliseconds; ARGV[3] how many of KEYS are
-- lock keys ('' for all: no records); ARGV[4] (an elected leader's renewal only) 'mark': a key
-- still holding the bare token is marked as it is renewed, so that a master the election's own
-- mark missed shows the leader from the next renewal on (and announces it on ARGV[5], the
-- election's channel).
-- Returns 1 if renewed (the keys live at least the TTL from now), 0 if a key is absent, held
-- by another token, or held past this holder's lease.
local n = tonumber(ARGV[3]) or #KEYS
local marked = '~elected:' .. ARGV[1]
local now
local records = {}
for i = 1, n do
  local key = KEYS[i]
  local value = redis.call('GET', key)
  if value ~= ARGV[1] and value ~= marked then
    return 0
  end
  local record = KEYS[n + i] and redis.call('GET', KEYS[n + i])
  if record then
    local token, lease, stretched = string.match(record, '^(.*)|(%d+)|(%d+)$')
    if token == ARGV[1] and redis.call('PEXPIRETIME', key) == tonumber(stretched) then
      if not now then
        local time = redis.call('TIME')
        now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
      end
      if tonumber(lease) <= now then
        return 0
      end
      records[i] = {tonumber(lease), tonumber(stretched)}
    end
  end
end
for i = 1, n do
  local key = KEYS[i]
  if ARGV[4] == 'mark' and redis.call('GET', key) == ARGV[1] then
    redis.call('SET', key, marked, 'KEEPTTL')
    redis.call('SPUBLISH', ARGV[5], '')
  end
  redis.call('PEXPIRE', key, ARGV[2], 'GT')
  local record = records[i]
  if record and redis.call('PEXPIRETIME', key) == record[2] then
    -- Still stretched past the renewal: the record carries the renewed lease.
    local lease = math.max(record[1], now + tonumber(ARGV[2]))
    local renewed = ARGV[1] .. '|' .. string.format('%d|%d', lease, record[2])
    redis.call('SET', KEYS[n + i], renewed, 'KEEPTTL')
  end
end
return 1
