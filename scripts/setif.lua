-- setif.lua - a fenced write (SETIF): set a data key to a value only if
-- the hold a fencing token names is alive in Redis.  The check and the
-- write are this one call, so no grant of the lock to another holder, no
-- expiry and no release can fall between them: a holder cut off past its
-- TTL writes nothing.
-- KEYS[1]  the lock key
-- KEYS[2]  the data key: the app's own name, no prefix (in cluster mode,
--          in the lock key's slot)
-- ARGV[1]  the token, decimal (1..2^53-1)
-- ARGV[2]  the value (1..1024 printable bytes)
-- ARGV[3]  the data key's TTL: '0' none (as SET: a TTL it had goes),
--          'keepttl' the TTL it has is kept, else ms (PX)
-- Returns 1 when written, 0 when the hold is not alive (lib/holders.lua,
-- hold_alive, as CHECK reads it): nothing written.  It writes, so Redis
-- refuses it under maxmemory before it runs, as a grant (embed.sh).
-- @include holders.lua
if not hold_alive(KEYS[1], ARGV[1]) then
  return 0
end
if ARGV[3] == 'keepttl' then
  redis.call('SET', KEYS[2], ARGV[2], 'KEEPTTL')
elseif ARGV[3] ~= '0' then
  redis.call('SET', KEYS[2], ARGV[2], 'PX', ARGV[3])
else
  redis.call('SET', KEYS[2], ARGV[2])
end
return 1
