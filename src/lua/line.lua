-- Shared by the scripts that keep a resource's wait line, and put ahead of each of them.
-- A line is a sorted set `<base>:queue` of waiter ids scored by the order each waiter chose, with
-- the time each entry lapses (the master's clock, in ms) in a second sorted set `<base>:leases`;
-- `<base>` is the lock key's companion base (see node/layout.rs): the key itself when it has a
-- hash tag, else the key in braces. Every key arrives in KEYS; only channels are named here.

-- The base of a resource's channels: its line key less ':queue' (keys.rs, LINE_SUFFIX).
local function channel_base(line)
  return string.sub(line, 1, -7)
end

-- The master's clock, in ms.
local function now_ms()
  local time = redis.call('TIME')
  return tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
end

-- Puts waiter `id` in the line at `order`, or keeps its place, its entry lapsing `lease` ms from
-- `now`. A line nobody renews goes away with its last entry's lease.
local function take_place(line, leases, id, order, lease, now)
  redis.call('ZADD', line, order, id)
  redis.call('ZADD', leases, string.format('%d', now + lease), id)
  if redis.call('PTTL', line) < lease then
    redis.call('PEXPIRE', line, lease)
    redis.call('PEXPIRE', leases, lease)
  end
end

-- Drops the entries whose waiter stopped renewing them.
local function drop_lapsed(line, leases, now)
  local lapsed = redis.call('ZRANGE', leases, '-inf', string.format('%d', now), 'BYSCORE')
  if #lapsed > 0 then
    redis.call('ZREM', line, unpack(lapsed))
    redis.call('ZREM', leases, unpack(lapsed))
  end
end

-- Whether quorumlock wrote `value`: a token (`ql-` and 32 hex digits, alone or followed by
-- `@<owner>` or `:<value>`, see token.rs), a reservation (`~queued:` and a waiter's id) or
-- either marked elected. No other Redlock client writes a value of these shapes, and
-- only quorumlock's own scripts renew one, each renewing the key's record with it (see stretch):
-- so only such a key is stretched, and a record speaks only for such a value.
local function ours(value)
  if not value then
    return false
  end
  if string.sub(value, 1, 9) == '~elected:' then
    value = string.sub(value, 10)
  end
  if string.sub(value, 1, 8) == '~queued:' then
    return true
  end
  if not string.find(value, '^ql%-' .. string.rep('%x', 32)) then
    return false
  end
  local after = string.sub(value, 36, 36)
  return after == '' or after == '@' or after == ':'
end

-- A key stretched for its line (see stretch) keeps its holder's own lease in a record, the key's
-- companion `<base>:held`: `<token>|<lease end>|<stretched until>` (the master's times, in ms).
-- The record speaks for the key only while the key still holds that token (or the token marked
-- elected), a value quorumlock wrote (see ours), and still expires when the stretch set it to:
-- any other write of the key (a grant, a hand-off) makes it void, and the key's own expiry is
-- the lease again. Only quorumlock's scripts write such a value, and each that renews it renews
-- the record too (extend.lua); a write by another client that keeps the value and the expiry
-- (a `PEXPIRE … GT` short of the stretch, a `SET … KEEPTTL`) cannot happen to it, as no other
-- client holds such a value. `record_in` judges the record's text given the key's value and
-- expiry; `record_of` reads all three. Each returns the lease end and the stretch, or nil.
local function record_in(record, value, expires)
  if not record or not ours(value) then
    return nil
  end
  local token, lease, stretched = string.match(record, '^(.*)|(%d+)|(%d+)$')
  if not token or (value ~= token and value ~= '~elected:' .. token)
      or expires ~= tonumber(stretched) then
    return nil
  end
  return tonumber(lease), tonumber(stretched)
end

local function record_of(key, held)
  local record = held and redis.call('GET', held)
  if not record then
    return nil
  end
  return record_in(record, redis.call('GET', key), redis.call('PEXPIRETIME', key))
end

-- Whether `key` is held past its holder's lease, kept only by its line's stretch: free for the
-- head of the line (and, with nobody live in line, for a plain attempt), as a key that expired.
local function lapsed(key, held, now)
  local lease = record_of(key, held)
  return lease ~= nil and lease <= now
end

-- Writes `value` to `key` for its line, which lasts until `lasts` (the master's time, in ms),
-- its holder's lease (`lease`) in the key's record (see stretch); an elected leader's record
-- names its token unmarked. The key is stretched twice as far ahead of `now` as the line
-- reaches: every waiter's renewal moves the line's expiry, and this way the key is rewritten
-- about once per entry lease rather than at each renewal. A key kept for a line whose waiters
-- all died then lives on up to one more entry lease; the line's scripts take it as lapsed all
-- the same, so only a bare `SET NX` (which then takes the script's way) and other clients see
-- that.
local function stretched_write(key, held, value, lease, lasts, now)
  local token = value
  if string.sub(value, 1, 9) == '~elected:' then
    token = string.sub(value, 10)
  end
  local reach = string.format('%d', lasts + math.max(0, lasts - now))
  redis.call('SET', held, token .. '|' .. string.format('%d|', lease) .. reach, 'PXAT', reach)
  redis.call('SET', key, value, 'PXAT', reach)
end

-- Keeps `key` alive at least as long as its line (SET … PXAT: the commands an ACL rule for the
-- line grants), so that while anybody waits the key exists and a bare `SET NX` (the plain
-- attempt, keys.rs) is refused: a key whose holder's lease runs out goes to the head of the
-- line (which takes it as lapsed), not to whoever asks first. The holder's own lease goes into
-- the key's record first (see record_of). A key holding another client's value is left to its
-- own expiry (see ours): that client may renew it in ways the record cannot see. Every script
-- that lengthens a line or rewrites a key with a line calls this last, for each key (or writes
-- the key with write_for_line).
local function stretch(key, held, line, now)
  if not held then
    return
  end
  local lasts = redis.call('PEXPIRETIME', line)
  local expires = redis.call('PEXPIRETIME', key)
  if lasts <= 0 or expires < 0 or expires >= lasts then
    return
  end
  local value = redis.call('GET', key)
  if not ours(value) then
    -- Another client's lock: it renews without the record, so its key keeps its own expiry.
    return
  end
  local lease = record_in(redis.call('GET', held), value, expires) or expires
  stretched_write(key, held, value, lease, lasts, now)
end

-- Writes `value` to `key` (a grant or a reservation) with its own lease ending at `lease` (the
-- master's time, in ms), stretched over its line at once when the line outlasts the lease: what
-- a `SET … PXAT lease` followed by stretch leaves, without reading back what it wrote. Without a
-- stretch, the key's earlier record goes (the new value voids it anyway).
local function write_for_line(key, held, line, value, lease, now)
  local lasts = held and redis.call('PEXPIRETIME', line) or -2
  if lasts > lease then
    stretched_write(key, held, value, lease, lasts, now)
    return
  end
  redis.call('SET', key, value, 'PXAT', string.format('%d', lease))
  if held then
    redis.call('DEL', held)
  end
end

-- Undoes the stretch of `key` whose line is gone: the key lapses when its holder's lease says
-- (deleted if that has passed, as it would have expired), and the record, applying or stale,
-- goes.
local function unstretch(key, held, now)
  local lease = record_of(key, held)
  if lease and lease <= now then
    redis.call('DEL', key)
  elseif lease then
    redis.call('SET', key, redis.call('GET', key), 'PXAT', lease)
  end
  redis.call('DEL', held)
end

-- A line that nobody live is left in lets its key lapse when its holder's lease says (see
-- unstretch).
local function settle(key, held, line, leases, now)
  if not held then
    return
  end
  drop_lapsed(line, leases, now)
  if redis.call('EXISTS', line) == 0 then
    unstretch(key, held, now)
  end
end

-- Hands `key` to the first live waiter in its line other than `skip` (with `held`, to `skip`
-- itself, quietly, when it is the only one), or deletes the key when nobody waits. The key then
-- holds `~queued:<waiter>`: a value no attempt's token can equal, so
-- `SET NX` refuses it like any held key and the waiter's own attempt takes it over; and the
-- waiter's lock token when a quorum of masters handed it over (see wakeup/handed.rs): the
-- waiter then holds the lock without another attempt. An announced waiter leaves the line here:
-- it holds the key, or takes its place again with its next attempt. The key lives `reserve` ms at
-- most, and never longer than the waiter's entry would have (its last renewal plus its entry
-- lease): a dead waiter blocks its line for no longer than its entry lease. (With `held`, the
-- key is then stretched over the rest of the line, the reservation's lease in its record.)
-- The hand-off is published on `<base>:released:<client>`, the client being the id's first 16
-- characters, so that only the waiter's own client hears it: `<waiter>:<now>:<expires>`, the
-- master's times (ms) of the hand-off and of the key's expiry. The cleanup of `quiet`'s own
-- failed attempt publishes nothing, and leaves it in line: that waiter knows, and a wake-up
-- would make it attempt again at once, against the same holder.
local function hand_over(key, line, leases, held, reserve, now, quiet, skip)
  drop_lapsed(line, leases, now)
  local head
  for _, id in ipairs(redis.call('ZRANGE', line, 0, 1)) do
    if id ~= skip then
      head = id
      break
    end
  end
  if not head and skip and held and redis.call('ZSCORE', leases, skip) then
    -- Nobody else waits, but `skip` still does: the key stays reserved for it, quietly, so
    -- that no bare `SET NX` takes it ahead of the line (see stretch).
    head, quiet = skip, skip
  end
  if not head then
    redis.call('DEL', key)
    if held then
      redis.call('DEL', held)
    end
    return
  end
  local lapses = tonumber(redis.call('ZSCORE', leases, head)) or now
  local lasts = math.max(1, math.min(reserve, lapses - now))
  if head ~= quiet then
    redis.call('ZREM', line, head)
    redis.call('ZREM', leases, head)
    local handed = head .. ':' .. string.format('%d:%d', now, now + lasts)
    redis.call('SPUBLISH', channel_base(line) .. ':released:' .. string.sub(head, 1, 16), handed)
  end
  -- Written once the head left the line: stretched over whoever is still in it, if anybody.
  write_for_line(key, held, line, '~queued:' .. head, now + lasts, now)
end

-- Whether `value` is a lock of `owner`: `<nonce>@<owner>`, one attempt's token under an owner id
-- (see token.rs). The nonce's fixed length (35 characters) makes the owner's offset certain.
local function owned_by(value, owner)
  return owner ~= nil and value ~= nil and value ~= false and #value == 36 + #owner
    and string.sub(value, 36, 36) == '@' and string.sub(value, 37) == owner and ours(value)
end

-- Whether the owner attempt `token` comes after the attempt of the same owner whose value is
-- `value`: its nonce's 32 digits after the prefix (the attempt's stamp, then random digits, see
-- token.rs) are greater, byte by byte. Of two attempts of one owner, only the later takes the
-- key over from the earlier (acquire_owned.lua, acquire_queued.lua): whichever order their
-- requests land in, the earlier's release never frees a key the later counted.
local function later(token, value)
  for i = 4, 35 do
    local a, b = string.byte(token, i), string.byte(value, i)
    if a ~= b then
      return a ~= nil and b ~= nil and a > b
    end
  end
  return false
end

-- Makes `key` expire no sooner than `at` (the master's time in ms); a key without an expiry
-- gets that one.
local function expire_no_sooner(key, at)
  if redis.call('PEXPIRETIME', key) < at then
    redis.call('PEXPIREAT', key, at)
  end
end

-- Takes `key` over for `token` for `ttl` ms, where it holds the value an attempt named (see
-- acquire_owned.lua), and notes in `took` (a hash: each attempt that took the key over, to the
-- value it replaced) what it replaced, so that the attempt's rollback can put it back
-- (restore.lua). The key never expires sooner than it would have, so the value put back lives
-- at least as long as it had; nor the notes sooner than the key. A key stretched for its line
-- keeps its record (see stretch), for the new value: its lease is the later of the two values'.
local function take_over(key, took, token, ttl, held)
  local replaced = redis.call('GET', key)
  local expires = redis.call('PEXPIRETIME', key)
  local lease, stretched = record_of(key, held)
  redis.call('SET', key, token, 'PX', ttl)
  local own = redis.call('PEXPIRETIME', key)
  expire_no_sooner(key, expires)
  if lease and redis.call('PEXPIRETIME', key) == stretched then
    local record = token .. '|' .. string.format('%d|%d', math.max(lease, own), stretched)
    redis.call('SET', held, record, 'KEEPTTL')
  end
  redis.call('HSET', took, token, replaced)
  expire_no_sooner(took, redis.call('PEXPIRETIME', key))
end

-- Whether the rollback of the attempt `token` ran here before its takeover (restore.lua): the
-- takeover, which ran late, must then take nothing.
local function undone(took, token)
  return redis.call('HGET', took, token) == '~undone'
end

-- A release of `token` that found its key taken over under an owner id (see take_over): the
-- value it released is noted released (''), so that the rollback of the attempt that took it
-- deletes the key rather than puts a lock nobody holds back (restore.lua).
local function released_under(took, token)
  local notes = redis.call('HGETALL', took)
  for i = 1, #notes, 2 do
    if notes[i + 1] == token then
      redis.call('HSET', took, notes[i], '')
    end
  end
end

-- The next fencing token of a resource whose counter is `counter`: one above the counter, and
-- never below the master's clock in whole seconds times a million. The counter lasts `lasts` ms:
-- the fencing grace plus the second the floor rounds away (keys.rs, `Keys::fenced`). So once it
-- expired, the master's clock is more than the grace past the counter's last write, and the
-- floor alone keeps the next token above every earlier one, as long as no master's clock runs
-- ahead of another's, or steps back, by the grace or more (and a resource is granted fewer than a
-- million times a second). Masters that evaluate it within the same second and share a history
-- agree on it (see fencing in redlock.rs). The number is written as an integer: Lua would write
-- it in exponent form.
local function next_fence(counter, lasts)
  local floor = tonumber(redis.call('TIME')[1]) * 1000000
  local fence = math.max(tonumber(redis.call('GET', counter) or '0') + 1, floor)
  redis.call('SET', counter, string.format('%d', fence), 'PX', lasts)
  return fence
end

-- Whether anybody waits in `line`: a plain attempt (no place in line) is refused then, so that
-- a key that fell free without a release (its holder's lease ran out) goes to the head of the
-- line, not to whoever asks first.
local function others_wait(line, leases, now)
  if redis.call('EXISTS', line) == 0 then
    return false
  end
  drop_lapsed(line, leases, now)
  return redis.call('EXISTS', line) == 1
end
