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
-- KEYS[2]  optional (OWNER <key> VALUE): the key's value key (value.lua);
--          an exclusive holder's answer is then {value, pttl, text}, text
--          "" when the hold has no value (value_of).
-- @include holders.lua
local h = holders_of(KEYS[1])
if KEYS[2] and #h == 2 and h[1] ~= '?' then
  h[3] = value_of(KEYS[2], h[1])
end
return h
