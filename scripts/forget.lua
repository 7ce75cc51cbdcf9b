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
-- Returns 1 when it freed the key, 0 when the key was not that client's.
local v = redis.call('GET', KEYS[1])
if v and string.match(v, '^(.*):%d+$') == ARGV[1] then
  redis.call('DEL', KEYS[1])
  local pub = string.sub(ARGV[2], -1) == '}' and 'SPUBLISH' or 'PUBLISH'
  redis.call(pub, ARGV[2], ARGV[3])
  return 1
end
return 0
