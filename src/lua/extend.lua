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
-- Under an owner id, a key that another attempt of the owner took over from this lock (a note in
-- its takeovers names this token, see take_over in line.lua) is this lock's way back there: that
-- attempt's rollback puts the value back whenever it lands (restore.lua). So the renewal, refused
-- there, keeps that key, its record's lease and its notes alive as it would have kept its own
-- key; a failed attempt whose rollback lands late then still gives a live lock its key back.
-- KEYS: the lock's keys (one per resource), then, for keys that wait in line, their records
-- (`<key>:held`), then (under an owner id: one key) its takeovers (`<key>:took`); ARGV[1] token;
-- ARGV[2] new TTL in milliseconds; ARGV[3] how many of KEYS are lock keys ('' for all: no
-- records); ARGV[4] (an elected leader's renewal only) 'mark': a key still holding the bare
-- token is marked as it is renewed, so that a master the election's own mark missed shows the
-- leader from the next renewal on (and announces it on ARGV[5], the election's channel).
-- Returns 1 if renewed (the keys live at least the TTL from now), 0 if a key is absent, held
-- by another token, or held past this holder's lease.
local n = tonumber(ARGV[3]) or #KEYS
local marked = '~elected:' .. ARGV[1]
local now

local function now_ms()
  if not now then
    local time = redis.call('TIME')
    now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
  end
  return now
end

-- The record (`<key>:held`) of `key` when it speaks for the key's value `value`: the lease and
-- the stretch (see record_in in line.lua, which also requires a value quorumlock wrote: `value`
-- here is this token or one of its owner's).
local function record_for(key, held, value)
  local record = held and redis.call('GET', held)
  if not record then
    return nil
  end
  local token, lease, stretched = string.match(record, '^(.*)|(%d+)|(%d+)$')
  if token ~= value or redis.call('PEXPIRETIME', key) ~= tonumber(stretched) then
    return nil
  end
  return {tonumber(lease), tonumber(stretched)}
end

-- Renews `key` for ARGV[2] ms, never shortening it; a key stretched past the renewal keeps the
-- renewed lease in its record (`held`, for `token`), never shortened either.
local function renew(key, held, token, record)
  redis.call('PEXPIRE', key, ARGV[2], 'GT')
  if record and redis.call('PEXPIRETIME', key) == record[2] then
    local lease = math.max(record[1], now_ms() + tonumber(ARGV[2]))
    redis.call('SET', held, token .. '|' .. string.format('%d|%d', lease, record[2]), 'KEEPTTL')
  end
end

-- Whether `value`, the key's value, is a takeover of this lock's value: the note of the attempt
-- that wrote it names this token, or names a value whose own note does, and so on (a chain of
-- takeovers, each rollback of which hands its note on). A note left by an attempt whose key is
-- gone since (released, expired, taken by somebody else) is not followed: only the value the
-- key holds now starts the chain.
local function taken_from_me(took, value)
  local seen = 0
  while value and seen < 16 do
    value = redis.call('HGET', took, value)
    if value == ARGV[1] then
      return true
    end
    seen = seen + 1
  end
  return false
end

-- See the top: keeps `key`, taken over from this lock, and its notes `took` alive.
local function keep_taken(key, held, took, value)
  if not taken_from_me(took, value) then
    return
  end
  local record = record_for(key, held, value)
  if record and record[1] <= now_ms() then
    -- Held past its lease, kept only for its line: as good as expired.
    return
  end
  renew(key, held, value, record)
  local expires = redis.call('PEXPIRETIME', key)
  if redis.call('PEXPIRETIME', took) < expires then
    redis.call('PEXPIREAT', took, expires)
  end
end

local records = {}
for i = 1, n do
  local key = KEYS[i]
  local value = redis.call('GET', key)
  if value ~= ARGV[1] and value ~= marked then
    if value and n == 1 and KEYS[3] then
      keep_taken(key, KEYS[2], KEYS[3], value)
    end
    return 0
  end
  local record = record_for(key, KEYS[n + i], ARGV[1])
  if record then
    if record[1] <= now_ms() then
      return 0
    end
    records[i] = record
  end
end
for i = 1, n do
  local key = KEYS[i]
  if ARGV[4] == 'mark' and redis.call('GET', key) == ARGV[1] then
    redis.call('SET', key, marked, 'KEEPTTL')
    redis.call('SPUBLISH', ARGV[5], '')
  end
  renew(key, KEYS[n + i], ARGV[1], records[i])
end
return 1
