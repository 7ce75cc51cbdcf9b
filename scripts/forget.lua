-- forget.lua - free a lock that an unanswered acquire may have taken.
-- KEYS[1]  the lock key
-- ARGV[1]  the client-id the acquire was for
-- ARGV[2]  the release channel (<prefix>:released); in cluster mode
--          the slot's channel, <prefix>:...:{tag}, published with SPUBLISH
--          (sharded: it stays within the slot's shard)
-- ARGV[3]  the lock name
-- When a connection to Redis dies with an acquire in flight, the broker
-- cannot know whether it ran; its client was told ERR UNAVAILABLE, so a
-- lock it got must not stay taken until its TTL ends.  Any token: the
-- client-id names the session, and the broker sends this before anything
-- else on the new connection.
-- A shared lock or a semaphore (a sorted set of holders, lib/holders.lua)
-- loses every holder of that client-id, whatever its token; the key's
-- expiry follows its last holder (with none left it is deleted).
-- Returns 1 when it freed the key (or removed holders of it), 0 when the
-- key was not that client's.
-- KEYS[2]  optional (protocol 1.2): the key's value key, deleted with an
--          exclusive hold (see release.lua).
-- @include holders.lua
local k = KEYS[1]
local v = get_str(k)
if v then
  if owner_of(v) ~= ARGV[1] then
    return 0
  end
  redis.call('DEL', k, KEYS[2] or k)
elseif v == false or redis.call('TYPE', k).ok ~= 'zset' or
    prune(k, now_ms()) == 0 or remove_owner(k, ARGV[1]) == 0 then
  return 0
else
  settle(k)
end
publish(ARGV[2], ARGV[3])
return 1
