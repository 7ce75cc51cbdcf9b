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
-- ARGV[6]  tokens to set aside after the one granted (see acquire.lua)
-- Cluster mode adds KEYS[3] and KEYS[4], the slot's lock delay and tenure,
-- and ARGV[7..10], the master's replication ids and the lock delay (see
-- lib/slot_tenure.lua); KEYS[2] is then the slot's counter.
-- Protocol 1.2, optional after those, as in acquire.lua: the watch mark
-- and the value key (when the next owner has a value, or the releasing
-- hold had one), then after the arguments the next owner's value text:
-- its value is written with its grant (the releasing hold's deleted), and
-- watchers are told (on ARGV[4]) while the mark exists.
-- Returns {1, token, more} when the lock passed to the next owner with a
-- new token (and more set aside after it, as acquire.lua does), or {0, 0}
-- when the releasing holder no longer held it (lost: {0, 3} when another
-- holds the key exclusive, as release.lua answers 3); the key is then left
-- as it was (but for a set's expired holders, pruned).  No PUBLISH then:
-- the lock is not free, so other brokers' waiters have nothing to wake for.  When the counter has
-- passed 2^53-1 (see acquire.lua) the lock is released plainly, with its
-- PUBLISH, and {-1, 0} returned: no token is left for the next owner.
-- A semaphore's permit (a sorted set of holders, lib/holders.lua) passes
-- the same way: the releasing holder, present and unexpired, leaves the
-- set and the next owner joins it with its own expiry; the key's expiry
-- follows.  Counter exhausted: the permit is released (and published).
-- @include slot_tenure.lua
-- @include holders.lua
local k = KEYS[1]
local cluster = sharded(KEYS[2])
local mark, vk, text = grant_extras(KEYS, ARGV, cluster and 4 or 2,
  cluster and 10 or 6)
local v = get_str(k)
local zset = false
local now
if v == nil and redis.call('TYPE', k).ok == 'zset' then
  zset = true
  now = now_ms()
  if not live(k, ARGV[1], now) then
    return {0, 0}
  end
elseif v ~= ARGV[1] then
  return {0, v == false and 0 or 3}
end
if cluster then
  slot_tenure(KEYS[2], KEYS[3], KEYS[4], ARGV[7], ARGV[8], ARGV[9], ARGV[10])
end
-- the counter and the watch mark in one read
local r = redis.call('MGET', KEYS[2], mark or KEYS[2])
local token, more = next_tokens(KEYS[2], zset and 0 or ARGV[6], r[1])
if not token then
  if zset then
    redis.call('ZREM', k, ARGV[1])
    settle(k)
  else
    redis.call('DEL', k, vk or k)
  end
  publish(ARGV[4], ARGV[5])
  return {-1, 0}
end
local nv = ARGV[2] .. ':' .. num(token)
if zset then
  redis.call('ZREM', k, ARGV[1])
  hold(k, nv, now, ARGV[3], kind_of(k))
else
  redis.call('SET', k, nv, 'PX', ARGV[3])
  if vk or (mark and r[2]) then
    granted(vk, text, token, ARGV[3], r[2], ARGV[4], ARGV[5])
  end
end
return {1, token, more}
