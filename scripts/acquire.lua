-- acquire.lua - take a lock if it is free.
-- KEYS[1]  the lock key (<prefix>:lock:<name>)
-- KEYS[2]  the fencing counter (<prefix>:fence), one per prefix
-- ARGV[1]  the owner: the session's client-id
-- ARGV[2]  TTL in ms (>= 1)
-- ARGV[3]  the "wanted" channel (<prefix>:wanted)
-- ARGV[4]  the announcement: "<broker-id> <lock name>"
-- ARGV[5]  "1" when the caller will wait for the lock, else "0"
-- Returns {1, token} when the caller now holds the lock (a new token from
-- the counter; or the token it already had if Redis shows it as the
-- caller's), or {0, pttl} when someone else holds it (pttl in ms, -1 if the
-- key has no expiry).  The value stored is "<client-id>:<token>".
-- A caller that will wait announces it on the wanted channel, so that the
-- holder's broker stops handing the lock straight to its own waiters.
local v = redis.call('GET', KEYS[1])
if v then
  local owner, token = string.match(v, '^(.*):(%d+)$')
  if owner == ARGV[1] then
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
    return {1, tonumber(token)}
  end
  if ARGV[5] == '1' then
    redis.call('PUBLISH', ARGV[3], ARGV[4])
  end
  return {0, redis.call('PTTL', KEYS[1])}
end
local token = redis.call('INCR', KEYS[2])
redis.call('SET', KEYS[1], ARGV[1] .. ':' .. token, 'PX', ARGV[2])
return {1, token}
