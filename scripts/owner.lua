-- owner.lua - who holds a lock, for how long, with which token.
-- KEYS[1]  the lock key
-- Returns {} when free.  Held exclusive (a string): {value, pttl}, value
-- "<client-id>:<token>" ("?" for a key of a type no broker writes), pttl
-- in ms (-1 if the key has no expiry).  Held shared or a semaphore (a
-- sorted set of holders, lib/holders.lua): {kind, total, value1, pttl1,
-- value2, pttl2, ...}: kind 0 shared or n permits, total the live holders,
-- then at most 16 of them (store.h's STORE_OWNER_SHOWN), soonest to
-- expire first, each with the ms it has left.  A set with no live holder
-- is free: {}.  Read only (expired holders are skipped, not removed).
-- @include holders.lua
local k = KEYS[1]
local v = get_str(k)
if v == false then
  return {}
end
if v then
  return {v, redis.call('PTTL', k)}
end
if redis.call('TYPE', k).ok ~= 'zset' then
  return {'?', redis.call('PTTL', k)}
end
local now = now_ms()
local from = '(' .. num(now)
local total = redis.call('ZCOUNT', k, from, '+inf')
if total == 0 then
  return {}
end
local out = {kind_of(k), total}
local shown = redis.call('ZRANGEBYSCORE', k, from, '+inf', 'WITHSCORES',
  'LIMIT', 0, 16)
for i = 1, #shown, 2 do
  out[#out + 1] = shown[i]
  out[#out + 1] = tonumber(shown[i + 1]) - now
end
return out
