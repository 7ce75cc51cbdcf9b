-- free.lua - FREE <key> (the admin view): end every hold of one key at
-- once, whoever holds it, on whatever broker; nothing else changes.
-- KEYS[1]  the lock key (a string held exclusive, or a sorted set of
--          holders: lib/holders.lua)
-- KEYS[2]  the key's value key (value.lua): it goes with an exclusive hold
-- ARGV[1]  the release channel (<prefix>:released; in cluster mode the
--          slot's, published with SPUBLISH)
-- ARGV[2]  the lock name
-- Every hold is freed, a lingering release's too (the key is free then).
-- When any was, "freed <name> <token>" is published, token the greatest
-- of the holds freed: each holder's broker ends its holds of the key with
-- a token up to that one as lost (a hold granted after this has a greater
-- token); then "<name>", which wakes the waiters of every broker as a
-- release does (and tells the key's watchers).  A lock name has no
-- blank, so a broker older than FREE takes the first message for no key.
-- Only deletes and publishes: it runs under maxmemory too (allow-oom).
-- Returns {holds freed, greatest token} ({0, 0}: nothing was held).
-- @include holders.lua
local k = KEYS[1]
local v = get_str(k)
local n, top = 0, 0
if v then
  n, top = 1, tonumber(token_of(v) or '0') or 0
  redis.call('DEL', k, KEYS[2])
elseif v == false or redis.call('TYPE', k).ok ~= 'zset' then
  return {0, 0}
else
  for _, m in ipairs(redis.call('ZRANGEBYSCORE', k, '(' .. num(now_ms()),
      '+inf')) do
    local t = tonumber(token_of(m) or '0') or 0
    n = n + 1
    if t > top then
      top = t
    end
  end
  redis.call('DEL', k)
  if n == 0 then
    return {0, 0}
  end
end
publish(ARGV[1], 'freed ' .. ARGV[2] .. ' ' .. num(top))
publish(ARGV[1], ARGV[2])
return {n, top}
