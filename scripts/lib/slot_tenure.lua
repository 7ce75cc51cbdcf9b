-- slot_tenure.lua - cluster mode's tenure, slot by slot.  Not a script of
-- its own: scripts/embed.sh puts it where a script says
-- "-- @include slot_tenure.lua".
-- In a Redis Cluster every script touches the keys of one slot, so the
-- fencing counter, the tenure and the lock delay are one key each per slot
-- (<prefix>:fence:{tag} and so on, the tag hashing to the slot), and a
-- slot's tenure is joined by the first grant or reassert that reaches it
-- on a master, not by a connection's handshake: tenure.lua's rule, per slot.
-- fence, delay, tenure  the slot's three keys
-- replid, replid2       the master's master_replid and master_replid2 (INFO)
-- delay_ms              the lock delay, "0" for none
-- A tenure recorded by the master this one took over from (its replid2: a
-- failover, which may have lost writes) raises the counter to TIME in
-- microseconds and starts the lock delay; one of another master (the slot
-- migrated here, and MIGRATE moves keys whole) or none (the slot's first
-- use, or its data lost) only raises the counter.
local function slot_tenure(fence, delay, tenure, replid, replid2, delay_ms)
  local cur = redis.call('GET', tenure)
  if cur == replid then
    return
  end
  redis.call('SET', tenure, replid)
  local t = redis.call('TIME')
  local floor = tonumber(t[1]) * 1000000 + tonumber(t[2])
  local c = tonumber(redis.call('GET', fence) or '0')
  if c == nil or c < floor then
    redis.call('SET', fence, string.format('%d', floor))
  end
  if cur and cur == replid2 and tonumber(delay_ms) > 0 then
    redis.call('SET', delay, replid, 'PX', delay_ms)
  end
end
