-- check.lua - is the hold a fencing token names alive in Redis now?  What
-- a resource that keeps no highest-token table of its own asks (CHECK).
-- KEYS[1]  the lock key
-- ARGV[1]  the token, decimal (1..2^53-1)
-- Returns {1} when a live hold of the key has that token: the exclusive
-- holder's value ends ":<token>", or a live holder of a shared lock or a
-- semaphore (lib/holders.lua) does; else {0, current}: the exclusive
-- holder's token, the newest live token of a shared lock or semaphore, or
-- -1 when no hold is alive: the key is free (or holds bytes no broker
-- wrote), or a RELEASE ... LINGER keeps it (linger.lua's
-- "<client-id>/linger:<token>": the hold ended, no one holds the key).
-- Tokens are compared as the strings the scripts write (%d), never as
-- numbers.  Read only: expired holders are skipped, not removed.
-- @include holders.lua
local k = KEYS[1]
local want = ARGV[1]
local function lingering(value)
  return string.find(value, '/linger:', 1, true) ~= nil
end
local v = get_str(k)
if v and lingering(v) then
  return {0, -1}
end
if v then
  local t = token_of(v)
  if t == want then
    return {1}
  end
  return {0, t and tonumber(t) or -1}
end
if v == false or redis.call('TYPE', k).ok ~= 'zset' then
  return {0, -1}
end
local newest = -1
for _, m in ipairs(redis.call('ZRANGEBYSCORE', k, '(' .. num(now_ms()),
    '+inf')) do
  local t = not lingering(m) and token_of(m)
  if t == want then
    return {1}
  end
  if t and tonumber(t) > newest then
    newest = tonumber(t)
  end
end
return {0, newest}
