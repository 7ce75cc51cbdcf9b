-- acquire.lua - take a lock if it is free.
-- KEYS[1]  the lock key (<prefix>:lock:<name>)
-- KEYS[2]  the fencing counter (<prefix>:fence), one per prefix
-- KEYS[3]  the lock delay (<prefix>:lockdelay, see tenure.lua)
-- ARGV[1]  the owner: the session's client-id
-- ARGV[2]  TTL in ms (>= 1)
-- ARGV[3]  the "wanted" channel (<prefix>:wanted); in cluster mode
--          the slot's channel, <prefix>:...:{tag}, published with SPUBLISH
--          (sharded: it stays within the slot's shard)
-- ARGV[4]  the announcement: "<broker-id> <lock name>"
-- ARGV[5]  "1" when the caller will wait for the lock, else "0"; "2": it
--          will wait and its broker recorded it (rwait.lua), so a release
--          may have granted it the key already (lib/holders.lua,
--          remote_grant)
-- ARGV[6]  tokens to set aside after the one granted (the early hand-off;
--          absent: 0)
-- Cluster mode adds KEYS[4], the slot's tenure, and ARGV[7..10], the
-- master's replication ids and the lock delay (see lib/slot_tenure.lua);
-- KEYS[2] and KEYS[3] are then the slot's counter and lock delay (their
-- names end in the slot's tag: lib/holders.lua, sharded).
-- Protocol 1.2, optional after those (lib/holders.lua, grant_extras): the
-- key's watch mark (watch.lua), and its value key (value.lua) when the
-- grant has a value; after the arguments the value text (ACQUIRE ...
-- VALUE).  A grant writes the value in this call, so no reader ever sees
-- the new holder without it, and tells the key's watchers ("held <name>"
-- on the release channel, lib/holders.lua channel_of) while its mark
-- exists.
-- Returns {1, token, more} when the caller now holds the lock, with a new
-- token from the counter and more tokens after it set aside for the
-- caller's broker (ARGV[6]; fewer near 2^53-1): it hands them out in
-- order to its next local holders of this key, without asking Redis first
-- (scripts/pass.lua brings the key up to date behind them), {0, pttl} when someone else holds it (pttl in ms, -1 if the
-- key has no expiry), or {-1, 0} when the counter has passed 2^53-1, the
-- largest integer a Lua number (a double) holds exactly: no token is left,
-- and nothing was written; or {2, ms} when the key is free but a lock delay
-- runs for ms more (a new master tenure: its holder's broker may still be
-- reclaiming it); or {3, n} when the key is a semaphore of n permits (see
-- below).  The value stored is "<client-id>:<token>".
-- Tokens are formatted with %d: Lua's default number format (%.14g) writes
-- 1e+14 for 100000000000000.
-- A caller that will wait announces it on the wanted channel, so that the
-- holder's broker stops handing the lock straight to its own waiters, and
-- (single and Sentinel mode) sets the key's listen mark, so that its
-- release is published (lib/holders.lua, listen; the marks' names are
-- made from KEYS[2], "<prefix>:fence", and the name in ARGV[4]).
-- A value of the caller's own is taken anew with a new token, never handed
-- back: the broker asks Redis only for keys it does not know the session
-- holds, so such a value is a remnant (a release lost with a failed
-- master's writes, a grant whose reply was lost) and its token may be
-- older than grants made since (tokens never go back).  Except for a
-- recorded waiter (ARGV[5] "2") when the key lives no longer than a
-- remote grant does: a release granted it to the record and published
-- the grant to its broker, which hands that grant (and its token, the one
-- watchers were told) to the waiter: {4, pttl}, nothing written.  Were it
-- a remnant after all, the key is free within pttl ms and the waiter
-- tries again then.
-- A key held shared or as a semaphore is a sorted set of holders
-- (lib/holders.lua): expired holders and a remnant of the caller's own
-- are removed first; with none left the key is free.  Else a shared lock
-- answers {0, pttl} (the key's PTTL: its last reader's expiry), a
-- semaphore of n permits {3, n} (another kind; nothing granted).
-- @include slot_tenure.lua
-- @include holders.lua
local cluster = sharded(KEYS[2])
if cluster then
  slot_tenure(KEYS[2], KEYS[3], KEYS[4], ARGV[7], ARGV[8], ARGV[9], ARGV[10])
end
local mark, vk, text = grant_extras(KEYS, ARGV, cluster and 4 or 3,
  cluster and 10 or 6)
local function busy()
  local pttl = redis.call('PTTL', KEYS[1])
  if ARGV[5] ~= '0' then
    publish(ARGV[3], ARGV[4])
    listen(KEYS[2], string.sub(ARGV[4], 38), pttl)
  end
  return {0, pttl}
end
local v = get_str(KEYS[1])
if v == nil and redis.call('TYPE', KEYS[1]).ok == 'zset' then
  local n = prune(KEYS[1], now_ms())
  if n > 0 and remove_owner(KEYS[1], ARGV[1]) > 0 then
    n = settle(KEYS[1])
  end
  if n > 0 then
    local kind = kind_of(KEYS[1])
    if kind > 0 then
      return {3, kind}
    end
    return busy()
  end
  v = false
end
if v then
  if owner_of(v) ~= ARGV[1] then
    return busy()
  end
  if ARGV[5] == '2' then
    local pttl = redis.call('PTTL', KEYS[1])
    if pttl > 0 and pttl <= REMOTE_GRANT_MS then
      return {4, pttl}
    end
  end
elseif v == nil then
  return busy()  -- bytes no broker wrote: taken, by no one we know
end
-- What a grant reads, in one command: the lock delay (for a free key),
-- the counter and the watch mark.
local r = redis.call('MGET', KEYS[3], KEYS[2], mark or KEYS[3])
if v == false and r[1] then
  local delay = redis.call('PTTL', KEYS[3])
  if delay > 0 then
    return {2, delay}
  end
end
local token, more = next_tokens(KEYS[2], ARGV[6], r[2])
if not token then
  return {-1, 0}
end
redis.call('SET', KEYS[1], ARGV[1] .. ':' .. num(token), 'PX', ARGV[2])
if vk or (mark and r[3]) then
  granted(vk, text, token, ARGV[2], r[3], channel_of(ARGV[3], ARGV[4]))
end
return {1, token, more}
