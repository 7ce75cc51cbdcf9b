-- handoff.lua - release a lock and give it to the next local waiter, in one
-- round trip.
-- KEYS[1]  the lock key
-- KEYS[2]  the fencing counter
-- ARGV[1]  the value the releasing holder set: "<client-id>:<token>"
-- ARGV[2]  the next owner's client-id
-- ARGV[3]  the next owner's TTL in ms
-- ARGV[4]  the release channel (<prefix>:released); in cluster mode
--          the slot's channel, <prefix>:...:{tag}, published with SPUBLISH
--          (sharded: it stays within the slot's shard)
-- ARGV[5]  the lock name
-- Cluster mode adds KEYS[3] and KEYS[4], the slot's lock delay and tenure,
-- and ARGV[6..9], the master's replication ids and the lock delay (see
-- lib/slot_tenure.lua); KEYS[2] is then the slot's counter.
-- Returns {1, token} when the lock passed to the next owner with a new
-- token, or {0, 0} when the releasing holder no longer held it (lost); the
-- key is then left as it was.  No PUBLISH then: the lock is not free, so
-- other brokers' waiters have nothing to wake for.  When the counter has
-- passed 2^53-1 (see acquire.lua) the lock is released plainly, with its
-- PUBLISH, and {-1, 0} returned: no token is left for the next owner.
-- @include slot_tenure.lua
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return {0, 0}
end
if KEYS[4] then
  slot_tenure(KEYS[2], KEYS[3], KEYS[4], ARGV[6], ARGV[7], ARGV[8], ARGV[9])
end
local last = tonumber(redis.call('GET', KEYS[2]) or '0')
if last >= 9007199254740991 then
  redis.call('DEL', KEYS[1])
  local pub = string.sub(ARGV[4], -1) == '}' and 'SPUBLISH' or 'PUBLISH'
  redis.call(pub, ARGV[4], ARGV[5])
  return {-1, 0}
end
local token = redis.call('INCR', KEYS[2])
redis.call('SET', KEYS[1], ARGV[2] .. ':' .. string.format('%d', token),
  'PX', ARGV[3])
return {1, token}
