-- delif.lua - a fenced delete (DELIF): delete a data key only if the hold
-- a fencing token names is alive in Redis, in this one call (see
-- setif.lua).
-- KEYS[1]  the lock key
-- KEYS[2]  the data key: the app's own name, no prefix (in cluster mode,
--          in the lock key's slot)
-- ARGV[1]  the token, decimal (1..2^53-1)
-- Returns 1 when the hold is alive (the data key is deleted, or was
-- absent already), 0 when not (nothing deleted).  It only reads and
-- deletes: a full Redis runs it as it runs a release (embed.sh's FREES).
-- @include holders.lua
if not hold_alive(KEYS[1], ARGV[1]) then
  return 0
end
redis.call('DEL', KEYS[2])
return 1
