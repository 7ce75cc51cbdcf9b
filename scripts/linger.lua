-- linger.lua - RELEASE ... LINGER: end a hold but keep the key taken for
-- a while, renewed by no one (issue 12; ShedLock's lock-at-least-for).
-- KEYS[1]  the lock key
-- ARGV[1]  the value the caller set: "<owner>:<token>"
-- ARGV[2]  the linger in ms (>= 1)
-- ARGV[3]  the release channel (see release.lua), ARGV[4] the lock name
-- The value becomes "<client-id>/linger:<token>": no session's owner, so
-- no renewal, release or re-acquire of the session matches it, and OWNER
-- still shows the client-id and the token.  The release channel is told,
-- though the key is not free yet: waiters elsewhere ask again and learn
-- its new, short PTTL, so they try again the moment it expires instead of
-- at the PTTL they saw before.
-- A shared hold or a permit (a sorted set of holders, lib/holders.lua):
-- the caller's holder, present and unexpired, is replaced by the
-- lingering one, expiring in ARGV[2] ms (a permit stays taken that long),
-- and the key's expiry follows its last holder.
-- Returns 1 when done, 0 when the hold was lost.
-- KEYS[2]  optional (protocol 1.2): the key's value key: the hold ends
--          here, and its value with it (the key stays taken, valueless).
-- @include holders.lua
local k = KEYS[1]
local owner = string.match(ARGV[1], '^[^/:]*')
local token = string.match(ARGV[1], ':(%d+)$')
if not token then
  return 0
end
local lv = owner .. '/linger:' .. token
local v = get_str(k)
if v == ARGV[1] then
  redis.call('SET', k, lv, 'PX', ARGV[2])
  if KEYS[2] then
    redis.call('DEL', KEYS[2])
  end
elseif v == nil and redis.call('TYPE', k).ok == 'zset' then
  local now = now_ms()
  if not live(k, ARGV[1], now) then
    return 0
  end
  redis.call('ZREM', k, ARGV[1])
  redis.call('ZADD', k, num(now + tonumber(ARGV[2])), lv)
  settle(k)
else
  return 0
end
publish(ARGV[3], ARGV[4])
return 1
