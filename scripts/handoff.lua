-- handoff.lua - release a lock and give it to the next local waiter, in one
-- round trip.
-- KEYS[1]  the lock key
-- KEYS[2]  the fencing counter
-- ARGV[1]  the value the releasing holder set: "<client-id>:<token>"
-- ARGV[2]  the next owner's client-id
-- ARGV[3]  the next owner's TTL in ms
-- Returns {1, token} when the lock passed to the next owner with a new
-- token, or {0, 0} when the releasing holder no longer held it (lost); the
-- key is then left as it was.  No PUBLISH: the lock is not free, so other
-- brokers' waiters have nothing to wake for.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return {0, 0}
end
local token = redis.call('INCR', KEYS[2])
redis.call('SET', KEYS[1], ARGV[2] .. ':' .. token, 'PX', ARGV[3])
return {1, token}
