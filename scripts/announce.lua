-- announce.lua - a broker says it shares this Redis and prefix, with its
-- version and features, and learns whether every broker that hears the
-- releases sets listen marks (single and Sentinel mode; each broker calls
-- it every second).
-- KEYS[1]  <prefix>:brokers, a sorted set: one member per broker,
--          "<broker-id> <version> <features>" (features: words joined by
--          ",", "marks" for a broker whose waiters and watchers set listen
--          marks, lib/holders.lua), scored by when it ends (Unix ms, from
--          Redis TIME) unless its broker calls again; the set expires with
--          the latest member
-- KEYS[2]  <prefix>:listenall: present while releases must be published
--          whether marked or not (batch/lean.lua)
-- ARGV[1]  this broker's member
-- ARGV[2]  its TTL in ms (a few calls' worth: one lost call costs nothing)
-- ARGV[3]  the release channel (<prefix>:released)
-- ARGV[4]  "1" when this broker's own subscriber is subscribed to it, "0"
--          while it is not yet (a start, a reconnect): one subscriber
--          fewer is then expected
-- A lean release publishes only where a mark says someone listens.  A
-- broker that sets no marks (one before them: it announces nothing, or one
-- whose member lacks "marks") would miss the releases its waiters wait
-- for, until their retry timers.  Every broker subscribes to the release
-- channel, so more subscribers there than announced brokers with marks
-- means such a broker (or another client) listens: <prefix>:listenall is
-- then set for the TTL, and every release is published, as before marks.
-- The announcements of a broker that died end with their TTL.
-- Returns {1 when <prefix>:listenall is set, else 0; Redis's clock in Unix
-- ms}: the broker measures a remote grant's age with it (store/announce.c).
-- @include holders.lua
local now = now_ms()
local ttl = tonumber(ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', num(now))
redis.call('ZADD', KEYS[1], num(now + ttl), ARGV[1])
redis.call('PEXPIRE', KEYS[1], ttl)
local marking, others = 0, false
for _, m in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
  local features = string.match(m, '^%S+ %S+ (%S+)$')
  if features and string.find(',' .. features .. ',', ',marks,', 1, true) then
    marking = marking + 1
  else
    others = true
  end
end
local subs = redis.call('PUBSUB', 'NUMSUB', ARGV[3])
if ARGV[4] == '0' then
  marking = marking - 1
end
if others or tonumber(subs[2]) > marking then
  redis.call('SET', KEYS[2], '1', 'PX', ttl)
  return {1, now}
end
redis.call('DEL', KEYS[2])
return {0, now}
