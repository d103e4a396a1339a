-- Whether another attempt of the owner took a lock's key over from it here: a note among the
-- key's takeovers (take_over in line.lua) names the lock's token as the value it replaced. It
-- only reads.
-- KEYS[1] the lock key's takeovers; ARGV[1] the lock's token.
-- Returns 1 if a note names it, else 0.
local notes = redis.call('HGETALL', KEYS[1])
for i = 2, #notes, 2 do
  if notes[i] == ARGV[1] then
    return 1
  end
end
return 0
