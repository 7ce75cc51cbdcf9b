-- renew.lua - extend many locks of one broker in one call.
-- KEYS[1..n]      the lock keys
-- ARGV[1..n]      the value each should hold: "<client-id>:<token>"
-- ARGV[n+1..2n]   each one's TTL in ms, "<ttl>" for a lock held exclusive,
--                 "<ttl>:<kind>" for a shared hold (kind 0) or a permit of
--                 a semaphore of kind permits
-- Returns an array of n integers: 1 renewed; 0 lost, the hold gone (it
-- expired, or was deleted: for a shared hold or a permit, whoever holds
-- the key now); 3 lost, the key another's now (taken: held exclusive by
-- another, or of another type).
-- Keys of every kind mix in one batch, each answered alone: a string
-- (exclusive) compared whole, a sorted set of holders (lib/holders.lua)
-- searched for the value, present and unexpired, whose expiry becomes
-- now + ttl (and the key's, its last holder's); a string item the other
-- kind's key answers 0, and the other way round.  No key's type can fail
-- the batch (a GET of a set is made with pcall).
-- @include holders.lua
local n = #KEYS
local out = {}
local now
for i = 1, n do
  local k, v = KEYS[i], ARGV[i]
  local ttl, kind = string.match(ARGV[n + i], '^(%d+):?(%d*)$')
  out[i] = 0
  if kind == '' then
    -- held exclusive: one GET, no TYPE (a set answers WRONGTYPE: nil)
    local s = get_str(k)
    if s == v then
      redis.call('PEXPIRE', k, ttl)
      out[i] = 1
    elseif s ~= false then
      out[i] = 3
    end
  else
    local t = redis.call('TYPE', k).ok
    if t == 'zset' then
      now = now or now_ms()
      if live(k, v, now) then
        redis.call('ZADD', k, 'XX', num(now + tonumber(ttl)), v)
        settle(k)
        out[i] = 1
      end
    elseif t ~= 'none' then
      out[i] = 3
    end
  end
end
return out
