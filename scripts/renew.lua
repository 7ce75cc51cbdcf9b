-- renew.lua - extend many locks of one broker in one call.
-- KEYS[1..n]      the lock keys
-- ARGV[1..n]      the value each should hold: "<client-id>:<token>"
-- ARGV[n+1..2n]   each one's TTL in ms, "<ttl>" for a lock held exclusive,
--                 "<ttl>:<kind>" for a shared hold (kind 0) or a permit of
--                 a semaphore of kind permits
-- Returns an array of n integers: 1 renewed, 0 lost (gone or another's).
-- Keys of every kind mix in one batch, each answered alone: a string
-- (exclusive) compared whole, a sorted set of holders (lib/holders.lua)
-- searched for the value, present and unexpired, whose expiry becomes
-- now + ttl (and the key's, its last holder's).  No key's type can fail
-- the batch.
-- @include holders.lua
local n = #KEYS
local out = {}
local now
for i = 1, n do
  local k, v = KEYS[i], ARGV[i]
  local ttl = string.match(ARGV[n + i], '^(%d+)')
  local t = redis.call('TYPE', k).ok
  out[i] = 0
  if t == 'string' then
    if redis.call('GET', k) == v then
      redis.call('PEXPIRE', k, ttl)
      out[i] = 1
    end
  elseif t == 'zset' then
    now = now or now_ms()
    if prune(k, now) > 0 and holds(k, v, now) then
      redis.call('ZADD', k, 'XX', num(now + tonumber(ttl)), v)
      settle(k)
      out[i] = 1
    end
  end
end
return out
