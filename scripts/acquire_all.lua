-- acquire_all.lua - take n locks exclusive together, or none (ACQUIRE ALL,
-- protocol 1.2).  Every key of one call is in one slot (cluster mode: the
-- broker calls it once per slot, in slot order, and gives back what it
-- took when a later slot is busy).
-- KEYS[1..n]    the lock keys (<prefix>:lock:<name>)
-- KEYS[n+1]     the fencing counter, KEYS[n+2] the lock delay (see
--               acquire.lua); cluster mode: the slot's, and KEYS[n+3] the
--               slot's tenure (lib/slot_tenure.lua)
-- then n more   each key's watch mark (watch.lua): a grant of a watched
--               key is told ("held <name>") as acquire.lua tells it
-- ARGV[1]  the owner: the session's client-id
-- ARGV[2]  TTL in ms (>= 1), every key's
-- ARGV[3]  n
-- ARGV[4]  the wanted channel, ARGV[5] this broker's id and a blank
--          ("<broker-id> "): a waiter announces each key it found held
-- ARGV[6]  "1" when the caller will wait, else "0": then (single and
--          Sentinel mode) each key found held gets its listen mark too
--          (lib/holders.lua, listen)
-- ARGV[7]  the release channel
-- ARGV[8..7+n]   the lock names
-- Cluster mode adds ARGV[8+n..11+n], the master's replication ids and the
-- lock delay (lib/slot_tenure.lua).
-- Returns {1, token1, ..., tokenn} when the caller now holds every key,
-- each with a new token (consecutive from the counter, in the keys'
-- order: tokens still rise per key); {0, i, pttl, j, pttl, ...} when keys
-- i, j ... are held by others (pttl in ms, -1 no expiry), nothing written
-- but the announcements; {2, ms} when every key is free but a lock delay
-- runs ms more; {3, i, kind} when key i is a shared lock (kind 0) or a
-- semaphore (kind n), nothing written; {-1, 0} when the counter has no n
-- tokens left below 2^53-1.  A value of the caller's own is a remnant and
-- is taken anew, as in acquire.lua.
-- @include slot_tenure.lua
-- @include holders.lua
local n = tonumber(ARGV[3])
local cluster = sharded(KEYS[n + 1])
if cluster then
  slot_tenure(KEYS[n + 1], KEYS[n + 2], KEYS[n + 3], ARGV[8 + n],
    ARGV[9 + n], ARGV[10 + n], ARGV[11 + n])
end
local marks = cluster and n + 3 or n + 2
local owner = ARGV[1]
local busy = {}
local now
for i = 1, n do
  local k = KEYS[i]
  local v = get_str(k)
  if v == nil and redis.call('TYPE', k).ok == 'zset' then
    now = now or now_ms()
    local held = prune(k, now)
    if held > 0 and remove_owner(k, owner) > 0 then
      held = settle(k)
    end
    if held > 0 then
      return {3, i, kind_of(k)}
    end
  elseif v == nil or (v and owner_of(v) ~= owner) then
    busy[#busy + 1] = i
    busy[#busy + 1] = redis.call('PTTL', k)
  end
end
if #busy > 0 then
  if ARGV[6] == '1' then
    for b = 1, #busy, 2 do
      publish(ARGV[4], ARGV[5] .. ARGV[7 + busy[b]])
      listen(KEYS[n + 1], ARGV[7 + busy[b]], busy[b + 1])
    end
  end
  table.insert(busy, 1, 0)
  return busy
end
local r = redis.call('MGET', KEYS[n + 2], KEYS[n + 1])
if r[1] then
  local delay = redis.call('PTTL', KEYS[n + 2])
  if delay > 0 then
    return {2, delay}
  end
end
local last = tonumber(r[2] or redis.call('GET', KEYS[n + 1]) or '0') or 0
local t = redis.call('TIME')
local base = math.max(last, tonumber(t[1]) * 1000000 + tonumber(t[2]) - 1)
if base + n >= 9007199254740991 then
  return {-1, 0}
end
redis.call('SET', KEYS[n + 1], num(base + n))
local watched = KEYS[marks + 1] and
  redis.call('MGET', unpack(KEYS, marks + 1, marks + n)) or {}
local out = {1}
for i = 1, n do
  redis.call('SET', KEYS[i], owner .. ':' .. num(base + i), 'PX', ARGV[2])
  out[i + 1] = base + i
  if watched[i] then
    publish(ARGV[7], 'held ' .. ARGV[7 + i])
  end
end
return out
