-- check.lua - is the hold a fencing token names alive in Redis now?  What
-- a resource that keeps no highest-token table of its own asks (CHECK).
-- KEYS[1]  the lock key
-- ARGV[1]  the token, decimal (1..2^53-1)
-- Returns {1} when a live hold of the key has that token, else {0,
-- current}: the current token, -1 when no hold is alive (lib/holders.lua,
-- hold_alive, says which holds are alive: the fenced writes ask the same).
-- Read only.
-- @include holders.lua
local alive, current = hold_alive(KEYS[1], ARGV[1])
if alive then
  return {1}
end
return {0, current}
