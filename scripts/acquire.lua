-- acquire.lua - take a lock if it is free.
-- KEYS[1]  the lock key (<prefix>:lock:<name>)
-- KEYS[2]  the fencing counter (<prefix>:fence), one per prefix
-- KEYS[3]  the lock delay (<prefix>:lockdelay, see tenure.lua)
-- ARGV[1]  the owner: the session's client-id
-- ARGV[2]  TTL in ms (>= 1)
-- ARGV[3]  the "wanted" channel (<prefix>:wanted); in cluster mode
--          the slot's channel, <prefix>:...:{tag}, published with SPUBLISH
--          (sharded: it stays within the slot's shard)
-- ARGV[4]  the announcement: "<broker-id> <lock name>"
-- ARGV[5]  "1" when the caller will wait for the lock, else "0"
-- Cluster mode adds KEYS[4], the slot's tenure, and ARGV[6..9], the
-- master's replication ids and the lock delay (see lib/slot_tenure.lua);
-- KEYS[2] and KEYS[3] are then the slot's counter and lock delay.
-- Returns {1, token} when the caller now holds the lock, with a new token
-- from the counter, {0, pttl} when someone else holds it (pttl in ms, -1 if the
-- key has no expiry), or {-1, 0} when the counter has passed 2^53-1, the
-- largest integer a Lua number (a double) holds exactly: no token is left,
-- and nothing was written; or {2, ms} when the key is free but a lock delay
-- runs for ms more (a new master tenure: its holder's broker may still be
-- reclaiming it).  The value stored is "<client-id>:<token>".
-- Tokens are formatted with %d: Lua's default number format (%.14g) writes
-- 1e+14 for 100000000000000 (issue 9, defect 7).
-- A caller that will wait announces it on the wanted channel, so that the
-- holder's broker stops handing the lock straight to its own waiters.
-- A value of the caller's own is taken anew with a new token, never handed
-- back: the broker asks Redis only for keys it does not know the session
-- holds, so such a value is a remnant (a release lost with a failed
-- master's writes, a grant whose reply was lost) and its token may be
-- older than grants made since (issue 10: tokens never go back).
-- @include slot_tenure.lua
if KEYS[4] then
  slot_tenure(KEYS[2], KEYS[3], KEYS[4], ARGV[6], ARGV[7], ARGV[8], ARGV[9])
end
local v = redis.call('GET', KEYS[1])
if v then
  local owner = string.match(v, '^(.*):%d+$')
  if owner ~= ARGV[1] then
    if ARGV[5] == '1' then
      local pub = string.sub(ARGV[3], -1) == '}' and 'SPUBLISH' or 'PUBLISH'
      redis.call(pub, ARGV[3], ARGV[4])
    end
    return {0, redis.call('PTTL', KEYS[1])}
  end
else
  local delay = redis.call('PTTL', KEYS[3])
  if delay > 0 then
    return {2, delay}
  end
end
local last = tonumber(redis.call('GET', KEYS[2]) or '0')
if last >= 9007199254740991 then
  return {-1, 0}
end
local token = redis.call('INCR', KEYS[2])
redis.call('SET', KEYS[1], ARGV[1] .. ':' .. string.format('%d', token),
  'PX', ARGV[2])
return {1, token}
