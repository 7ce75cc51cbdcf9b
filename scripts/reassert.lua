-- reassert.lua - reclaim this broker's locks on a new connection.
-- KEYS[1..n]      the lock keys
-- KEYS[n+1]       the lock delay (<prefix>:lockdelay)
-- ARGV[1..n]      the value each should hold: "<client-id>:<token>"
-- ARGV[n+1..2n]   the TTL in ms to set on each
-- Cluster mode (the lock delay's name ends in "}", a slot's tag) adds
-- KEYS[n+2] and KEYS[n+3], the slot's counter and tenure, and
-- ARGV[2n+1..2n+4], the master's replication ids and the lock delay
-- (lib/slot_tenure.lua): a reassert may be the first call to reach the
-- slot on a new master, and the delay must be started before it is looked
-- at.
-- Returns an array of n integers: 1 still ours (renewed), 2 absent and set
-- again, 0 lost (another's, or absent with no lock delay running).
-- An absent key is set again only during the lock delay that follows a new
-- master tenure: then no broker has granted it since (acquire.lua refuses
-- absent keys meanwhile), so the lock was lost with the old master's
-- writes, not freed and taken by someone else.  Outside the delay an
-- absent key expired: the holder is told it lost it.
-- @include slot_tenure.lua
local n = #KEYS - 1
if string.sub(KEYS[#KEYS], -1) == '}' then
  n = #KEYS - 3
  slot_tenure(KEYS[n + 2], KEYS[n + 1], KEYS[n + 3], ARGV[2 * n + 1],
    ARGV[2 * n + 2], ARGV[2 * n + 3], ARGV[2 * n + 4])
end
local delay = redis.call('PTTL', KEYS[n + 1]) > 0
local out = {}
for i = 1, n do
  local v = redis.call('GET', KEYS[i])
  if v == ARGV[i] then
    redis.call('PEXPIRE', KEYS[i], ARGV[n + i])
    out[i] = 1
  elseif not v and delay then
    redis.call('SET', KEYS[i], ARGV[i], 'PX', ARGV[n + i])
    out[i] = 2
  else
    out[i] = 0
  end
end
return out
