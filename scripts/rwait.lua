-- rwait.lua - record, or forget, a waiter of this broker for a release
-- elsewhere to grant it the key in the release's own call (the
-- cross-broker hand-off in one round trip, lib/holders.lua remote_grant).
-- Single and Sentinel mode only.
-- KEYS[1]  the lock key
-- KEYS[2]  its record set, <prefix>:rwait:<name>
-- ARGV[1]  "1" record, "0" forget
-- ARGV[2]  the record: "<broker-id> <wait-id> <ttl ms> <owner>[ <value>]"
--          (value: the text of ACQUIRE ... VALUE, written with the grant)
-- ARGV[3]  record: how long the set must last at least, ms (the wait's
--          time left, and some)
-- Recording: only while the key is held exclusive by another owner; a
-- record made before keeps its score, so its place.  Returns 1 recorded
-- (forget: 1 forgotten, 0 there was none), 0 not because the key is free
-- (its broker tries it again), 3 not because it is held otherwise (a set
-- of holders, bytes no broker wrote, a value of the waiter's own).
-- @include holders.lua
if ARGV[1] == '0' then
  return redis.call('ZREM', KEYS[2], ARGV[2])
end
local v = get_str(KEYS[1])
local owner = string.match(ARGV[2], '^%S+ %d+ %d+ (%S+) ?%S*$')
if v == false then
  return 0
end
if not v or not owner or owner_of(v) == owner then
  return 3
end
redis.call('ZADD', KEYS[2], 'NX', num(now_ms()), ARGV[2])
local ms = tonumber(ARGV[3]) or 0
if redis.call('PTTL', KEYS[2]) < ms then
  redis.call('PEXPIRE', KEYS[2], ms)
end
return 1
