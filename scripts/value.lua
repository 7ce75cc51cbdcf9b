-- value.lua - the value an exclusive holder shows beside its lock (VALUE,
-- PROCLAIM: where a leader is reached), written or refreshed.
-- KEYS[1]  the lock key
-- KEYS[2]  the key's value, <prefix>:value:<name> (in cluster mode
--          <prefix>:value:{<tag>}<name>: in the lock's slot), a string
--          "<token> <text>": it belongs to the hold with that token, and
--          to no other (tokens of a key never repeat), so a value left
--          behind by a hold that ended is never shown: readers compare
--          the token with the lock's (lib/holders.lua, value_of)
-- KEYS[3]  the key's watch mark, <prefix>:watched:<name> (same slot;
--          watch.lua): present while some broker's session watches it
-- ARGV[1]  the hold's value, "<client-id>:<token>" as its broker wrote it
-- ARGV[2]  the text (1..256 bytes of 0x21..0x7e, checked by the broker)
-- ARGV[3]  the release channel, ARGV[4] the lock name: a change is told
--          to watchers as "held <name>" there (see holders.lua, changed)
-- Returns 1 when the key shows that hold and its value is now the text,
-- expiring with the lock (its PTTL); 0 when the key is free (the hold
-- ended) and 3 when another holds it: nothing is written then.
-- A renewal calls it again for a hold with a value, so the value's TTL
-- follows the lock's.
-- @include holders.lua
local v = get_str(KEYS[1])
if v ~= ARGV[1] then
  return v == false and 0 or 3
end
local new = token_of(v) .. ' ' .. ARGV[2]
local old = redis.call('GET', KEYS[2])
local pttl = redis.call('PTTL', KEYS[1])
if pttl > 0 then
  redis.call('SET', KEYS[2], new, 'PX', pttl)
else
  redis.call('SET', KEYS[2], new)
end
if old ~= new then
  changed(KEYS[3], ARGV[3], ARGV[4])
end
return 1
