-- A candidate whose campaign won marks its key as the elected leader's: the value becomes the
-- token with '~elected:' ahead of it, its expiry kept, where the key still holds the token. Only
-- marked keys are reported as a leader (read_leader.lua): an attempt can hold a quorum for a
-- moment and still lose (its replies lost, its validity used up), and a read could not tell it
-- from a winner. The holder's extend, fence and release scripts accept both forms.
-- Marking announces the new leader on the election's channel, for the observers (see election.rs).
-- KEYS[1] the election's key; ARGV[1] the leader's token; ARGV[2] the channel.
-- Returns 1 if the key is (now) marked, 0 if it holds something else.
local value = redis.call('GET', KEYS[1])
local marked = '~elected:' .. ARGV[1]
if value == ARGV[1] then
  redis.call('SET', KEYS[1], marked, 'KEEPTTL')
  redis.call('SPUBLISH', ARGV[2], '')
  return 1
end
if value == marked then
  return 1
end
return 0
