-- release.lua - free a lock if it is still the caller's, and say so.
-- KEYS[1]  the lock key
-- ARGV[1]  the value the caller set: "<client-id>:<token>"
-- ARGV[2]  the release channel (<prefix>:released); in cluster mode
--          the slot's channel, <prefix>:...:{tag}, published with SPUBLISH
--          (sharded: it stays within the slot's shard)
-- ARGV[3]  the lock name, published so other brokers wake their waiters
-- Returns 1 when released; when the caller's lock was lost, 0 when its
-- hold was gone (expired, deleted; for a shared hold or a permit, whoever
-- holds the key now) and 3 when another holds the key exclusive (taken).
-- A shared lock or a semaphore (a sorted set of holders, lib/holders.lua):
-- the caller's holder, present and unexpired, leaves the set (the key's
-- expiry follows its last holder; with none left it is deleted) and the
-- release is published too (a read hold or a permit freed is news for
-- waiters elsewhere): 1.  An expired holder is removed: 0.
-- It works by value alone, whatever the key's kind: it is also the undo of
-- a grant WAIT did not confirm (store.c, group_undo).
-- KEYS[2]  optional (protocol 1.2): the key's value key (value.lua), given
--          when the hold has a value: deleted with an exclusive hold in
--          the same command, so a value lives exactly as long as its hold.
-- An exclusive hold released to a waiter on some broker recorded in
-- "<prefix>:rwait:<name>" goes to the earliest of them in this same call
-- (lib/holders.lua, remote_grant): no PUBLISH of the release then, the
-- key being taken again, but the grant's own message.  Still 1: the
-- caller's hold is released.
-- @include holders.lua
local k = KEYS[1]
local v = get_str(k)
if v == ARGV[1] then
  if KEYS[2] then
    redis.call('DEL', k, KEYS[2])
  else
    redis.call('DEL', k)
  end
  if not remote_grant(string.sub(ARGV[2], 1, -9), k, ARGV[3], ARGV[2]) then
    publish(ARGV[2], ARGV[3])
  end
  return 1
end
if v then
  return 3
end
if v == false or redis.call('TYPE', k).ok ~= 'zset' then
  return v == false and 0 or 3
end
if not live(k, ARGV[1], now_ms()) then
  return 0
end
redis.call('ZREM', k, ARGV[1])
settle(k)
publish(ARGV[2], ARGV[3])
return 1
