-- sacquire.lua - take a lock shared, or a permit of a semaphore, if one is
-- free (acquire.lua takes a lock exclusive).
-- KEYS[1]  the lock key (<prefix>:lock:<name>): a sorted set of holders
--          (lib/holders.lua), or a string when held exclusive
-- KEYS[2]  the fencing counter (<prefix>:fence), one per prefix
-- KEYS[3]  the lock delay (<prefix>:lockdelay, see tenure.lua)
-- ARGV[1]  the owner: the session's client-id
-- ARGV[2]  TTL in ms (>= 1)
-- ARGV[3]  the "wanted" channel (<prefix>:wanted); in cluster mode the
--          slot's channel, <prefix>:...:{tag}, published with SPUBLISH
-- ARGV[4]  the announcement: "<broker-id> <lock name>"
-- ARGV[5]  "1" when the caller will wait, else "0": a key found held
--          exclusive then gets its listen mark (single and Sentinel mode,
--          lib/holders.lua, listen)
-- ARGV[6]  the kind asked: "0" shared, "n" (>= 1) a permit of n
-- ARGV[7]  a shared request: the writers it came after (writer marks): "-1"
--          those marked before this call (it is the reader's arrival),
--          "0" none, a stamp: those whose marks' stamps are not later
-- KEYS[4]  the key's writer marks (<prefix>:writers:<name>, wmark.lua)
-- Cluster mode adds KEYS[4], the slot's tenure (the marks are KEYS[5]),
-- and ARGV[8..11], the master's replication ids and the lock delay (see
-- lib/slot_tenure.lua); KEYS[2] and KEYS[3] are then the slot's counter
-- and lock delay.
-- Protocol 1.2, optional after those, as in acquire.lua: the watch mark:
-- a grant is told to the key's watchers while the mark exists (the count
-- of holders changed).  (A shared hold or a permit has no value.)
-- Returns, like acquire.lua:
--   {1, token}  granted: a new token from the counter; the holder
--               "<client-id>:<token>" joined the set
--   {0, ms, w}  not now: held exclusive (ms: the PTTL, -1 no expiry), or
--               every permit is taken (ms: until the soonest holder
--               expires), or (shared) a writer waits that came before
--               this reader (ms: until that writer's mark ends unless
--               refreshed); announced on the wanted channel if the caller
--               will wait.  w: the latest stamp of the marks of writers
--               on other brokers (0 none): the writers this reader came
--               after, for its next tries (ARGV[7])
--   {2, ms}     the key is free, or a permit is free, or (shared) only
--               readers hold it, but a lock delay runs ms more (a new
--               master tenure: holds of the old master may be reclaimed
--               meanwhile, a writer's among them: the readers seen may be
--               a lagging replica's, and gone on the old master)
--   {3, k}      the key is of another kind, nothing written: k 0 a lock
--               (held exclusive, or shared when a permit was asked), k n a
--               semaphore of n permits (when shared or another n was asked)
--   {-1, 0}     the counter has passed 2^53-1 (see acquire.lua): nothing
--               written
-- A holder of the caller's own found in the set is a remnant (a grant
-- whose reply was lost, a release lost with a master), as in acquire.lua:
-- it is removed and the caller gets a new token (tokens never go back),
-- so one session never counts twice.
-- A writer that waits is not overtaken by readers that came after it,
-- on any broker (writer marks): its broker marks it (wmark.lua) with the time
-- it began waiting; a shared request is not granted while the mark of a
-- writer on another broker that it came after lives (the writer's own
-- broker keeps its readers and writers in order itself).  A reader's
-- broker says which writers it came after (ARGV[7]): those it knew of
-- when the reader arrived, never later ones, so no two brokers' waiters
-- can each wait for the other's.
-- @include slot_tenure.lua
-- @include holders.lua
local cluster = sharded(KEYS[2])
local marks = KEYS[cluster and 5 or 4]
if cluster then
  slot_tenure(KEYS[2], KEYS[3], KEYS[4], ARGV[8], ARGV[9], ARGV[10], ARGV[11])
end
local mark = grant_extras(KEYS, ARGV, cluster and 5 or 4, cluster and 11 or 7)
local k = KEYS[1]
local want = tonumber(ARGV[6])
local t = redis.call('TIME')
local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
local now = math.floor(now_us / 1000)
local broker = string.sub(ARGV[4], 1, 36)

-- The writers of other brokers waiting now: the latest stamp among them
-- (0 none), and the ms until the soonest mark ends among those this
-- reader came after (nil none).
local function writers(seen)
  local latest, soonest = 0, nil
  local all = redis.pcall('HGETALL', marks)
  if all.err then
    all = {}            -- bytes no broker wrote: no marks
  end
  if seen < 0 then
    seen = now_us
  end
  for i = 2, #all, 2 do
    local stamp, exp, b = string.match(all[i], '^(%d+) (%d+) (%S+)$')
    stamp, exp = tonumber(stamp), tonumber(exp)
    if stamp and exp > now and b ~= broker then
      latest = math.max(latest, stamp)
      if stamp <= seen and (not soonest or exp < soonest) then
        soonest = exp
      end
    end
  end
  return latest, soonest and soonest - now
end

-- excl: held exclusive, whose release (batch/lean.lua) is published only
-- to listeners: a waiter sets the key's listen mark (lib/holders.lua); a
-- shared hold's or a permit's release is always published.
local function busy(ms, excl)
  if ARGV[5] == '1' then
    publish(ARGV[3], ARGV[4])
    if excl then
      listen(KEYS[2], string.sub(ARGV[4], 38), ms)
    end
  end
  return {0, ms, (writers(-1))}
end

local t = redis.call('TYPE', k).ok
if t ~= 'zset' and t ~= 'none' then
  -- held exclusive (a string "<owner>:<token>", or bytes no broker wrote)
  if want > 0 then
    return {3, 0}
  end
  return busy(redis.call('PTTL', k), true)
end
local n = 0
if t == 'zset' then
  n = prune(k, now)
  if n > 0 and remove_owner(k, ARGV[1]) > 0 then
    n = settle(k)
  end
end
if n > 0 then
  local kind = kind_of(k)
  if kind ~= want then
    return {3, kind}
  end
  if want > 0 and n >= want then
    local first = redis.call('ZRANGEBYSCORE', k, '(0', '+inf',
      'WITHSCORES', 'LIMIT', 0, 1)
    return busy(tonumber(first[2]) - now)
  end
end
-- A reader does not overtake a writer it came after.
if want == 0 and ARGV[7] ~= '0' then
  local _, ms = writers(tonumber(ARGV[7]) or -1)
  if ms then
    return busy(ms)
  end
end
-- Free, or joined beside holders: not during a lock delay, not even
-- beside readers (the set may be a lagging replica's, and the key a
-- writer's on the old master, reclaimed during the delay).
-- (the lock delay and the watch mark in one read)
local r = redis.call('MGET', KEYS[3], mark or KEYS[3])
if r[1] then
  local delay = redis.call('PTTL', KEYS[3])
  if delay > 0 then
    return {2, delay}
  end
end
local token = next_token(KEYS[2])
if not token then
  return {-1, 0}
end
hold(k, ARGV[1] .. ':' .. num(token), now, ARGV[2], want)
if mark and r[2] then
  local chan, name = channel_of(ARGV[3], ARGV[4])
  publish(chan, 'held ' .. name)
end
return {1, token}
