-- release.lua - free a lock if it is still the caller's, and say so.
-- KEYS[1]  the lock key
-- ARGV[1]  the value the caller set: "<client-id>:<token>"
-- ARGV[2]  the release channel (<prefix>:released); in cluster mode
--          the slot's channel, <prefix>:...:{tag}, published with SPUBLISH
--          (sharded: it stays within the slot's shard)
-- ARGV[3]  the lock name, published so other brokers wake their waiters
-- Returns 1 when released, 0 when the key was gone or held by another
-- (the caller's lock was lost).
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  local pub = string.sub(ARGV[2], -1) == '}' and 'SPUBLISH' or 'PUBLISH'
  redis.call(pub, ARGV[2], ARGV[3])
  return 1
end
return 0
