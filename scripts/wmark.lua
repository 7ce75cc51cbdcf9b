-- wmark.lua - the mark of a writer waiting for a lock, which readers on
-- other brokers respect (writers across brokers): a waiting exclusive ACQUIRE is not
-- overtaken by SHARED requests that arrived after it (sacquire.lua).
-- KEYS[1]  the key's writer marks, <prefix>:writers:<name> (in cluster
--          mode <prefix>:writers:{<tag>}<name>: in the lock's slot), a
--          hash: one field per waiting writer (its owner), the value
--          "<stamp> <expiry> <broker-id>": when it began waiting (Redis
--          TIME in microseconds), when the mark ends unless its broker
--          refreshes it (ms), and that broker's id.  The hash expires with
--          its latest mark: the marks of a broker that died end on their
--          own, a TTL after its last refresh.
-- ARGV[1]  "wait" (make or refresh the writer's mark) or "leave"
-- ARGV[2]  the writer's owner (its client-id)
-- ARGV[3]  its broker's id
-- ARGV[4]  wait: the mark's TTL in ms; leave: "1" to wake waiters (the
--          writer gave up: readers it held back may go now), "0" not (it
--          was granted: they wait for its release anyway)
-- ARGV[5]  the "wanted" channel, ARGV[6] the lock name, ARGV[7] the
--          release channel (in cluster mode the slot's channels)
-- wait: a new mark (none, or one that had expired) gets this call's
-- stamp and is announced on the wanted channel as "<broker-id>!<stamp>
-- <name>": a broker that hears it knows that readers arriving from then
-- on came after this writer.  A refresh keeps the stamp.  Returns the
-- stamp.
-- leave: returns 1 when a mark was removed, else 0.
-- @include holders.lua
local k = KEYS[1]
if ARGV[1] == 'leave' then
  local gone = redis.call('HDEL', k, ARGV[2])
  if gone > 0 and ARGV[4] == '1' then
    publish(ARGV[7], ARGV[6])
  end
  return gone
end
local t = redis.call('TIME')
local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
local now = math.floor(now_us / 1000)
local ttl = tonumber(ARGV[4])
local stamp, exp = string.match(redis.call('HGET', k, ARGV[2]) or '',
  '^(%d+) (%d+)')
stamp = tonumber(stamp)
if not stamp or tonumber(exp) <= now then
  stamp = now_us
  publish(ARGV[5], ARGV[3] .. '!' .. num(stamp) .. ' ' .. ARGV[6])
end
redis.call('HSET', k, ARGV[2], num(stamp) .. ' ' .. num(now + ttl) .. ' ' ..
  ARGV[3])
if redis.call('PTTL', k) < ttl then
  redis.call('PEXPIRE', k, ttl)
end
return stamp
