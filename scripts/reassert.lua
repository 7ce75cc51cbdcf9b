-- reassert.lua - reclaim this broker's locks on a new connection.
-- KEYS[1..n]      the lock keys
-- KEYS[n+1]       the lock delay (<prefix>:lockdelay)
-- ARGV[1..n]      the value each should hold: "<client-id>:<token>"
-- ARGV[n+1..2n]   each one's TTL in ms, "<ttl>" for a lock held exclusive,
--                 "<ttl>:<kind>" for a shared hold (kind 0) or a permit of
--                 a semaphore of kind permits
-- Cluster mode (the lock delay's name ends in "}", a slot's tag) adds
-- KEYS[n+2] and KEYS[n+3], the slot's counter and tenure, and
-- ARGV[2n+1..2n+4], the master's replication ids and the lock delay
-- (lib/slot_tenure.lua): a reassert may be the first call to reach the
-- slot on a new master, and the delay must be started before it is looked
-- at.
-- Returns an array of n integers: 1 still ours (renewed), 2 absent and set
-- again, 0 lost (absent with no lock delay running; a shared hold or a
-- permit not added back), 3 lost (held exclusive by another, or the key
-- is of another kind now), as renew.lua answers.
-- An absent key is set again only during the lock delay that follows a new
-- master tenure: then no broker has granted it since (acquire.lua refuses
-- absent keys meanwhile), so the lock was lost with the old master's
-- writes, not freed and taken by someone else.  Outside the delay an
-- absent key expired: the holder is told it lost it.
-- A shared hold or a permit (a sorted set of holders, lib/holders.lua) is
-- renewed as renew.lua does.  Absent from its set during the delay, it is
-- added back when the set is of its kind (or the key absent: the set is
-- made, "#" from the kind), and for a semaphore only while fewer than its
-- permits are held: a permit is never granted twice over (sacquire.lua
-- grants no permit during the delay, but the old master's writes may be
-- lost in any order).  A string key (held exclusive) is another's: 0.
-- @include slot_tenure.lua
-- @include holders.lua
local n = #KEYS - 1
if string.sub(KEYS[#KEYS], -1) == '}' then
  n = #KEYS - 3
  slot_tenure(KEYS[n + 2], KEYS[n + 1], KEYS[n + 3], ARGV[2 * n + 1],
    ARGV[2 * n + 2], ARGV[2 * n + 3], ARGV[2 * n + 4])
end
local delay = redis.call('PTTL', KEYS[n + 1]) > 0
local now = now_ms()
local out = {}
for i = 1, n do
  local k, v = KEYS[i], ARGV[i]
  local ttl, kind = string.match(ARGV[n + i], '^(%d+):?(%d*)$')
  out[i] = 0
  if kind == nil or kind == '' then
    -- held exclusive: one GET, no TYPE (a set answers WRONGTYPE: nil)
    local s = get_str(k)
    if s == v then
      redis.call('PEXPIRE', k, ttl)
      out[i] = 1
    elseif s == false and delay then
      redis.call('SET', k, v, 'PX', ttl)
      out[i] = 2
    elseif s ~= false then
      out[i] = 3
    end
  else
    local t = redis.call('TYPE', k).ok
    kind = tonumber(kind)
    local held = 0
    if t == 'zset' then
      held = prune(k, now)
      if held > 0 and holds(k, v, now) then
        redis.call('ZADD', k, 'XX', num(now + tonumber(ttl)), v)
        settle(k)
        out[i] = 1
      elseif held > 0 and kind_of(k) ~= kind then
        held = -1
      end
    elseif t ~= 'none' then
      held = -1
    end
    if out[i] == 0 and delay and held >= 0 and
        (kind == 0 or held < kind) then
      hold(k, v, now, ttl, kind)
      out[i] = 2
    elseif out[i] == 0 and held < 0 then
      out[i] = 3
    end
  end
end
return out
