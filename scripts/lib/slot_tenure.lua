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
-- prev                  the replication id the broker saw on this master's
--                       address before the last change ("" if none)
-- delay_ms              the lock delay, "0" for none
-- A new tenure raises the counter to TIME in microseconds, and starts the
-- lock delay when writes of the slot may have been lost: the tenure
-- recorded is the one this master took over from (its replid2: a failover)
-- or this address's earlier one (a restart), or none is recorded although
-- this address had another tenure before (a restart without its data).
-- One of another master (the slot migrated here, and MIGRATE moves keys
-- whole) or none on a master seen once (the slot's first use) only raises
-- the counter.  Not covered: two failovers before any call reached the
-- slot (the tokens are still safe, by the counter's floor).
local function slot_tenure(fence, delay, tenure, replid, replid2, prev,
    delay_ms)
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
  local lost
  if cur then
    lost = cur == replid2 or cur == prev
  else
    lost = prev ~= ''
  end
  if lost and tonumber(delay_ms) > 0 then
    redis.call('SET', delay, replid, 'PX', delay_ms)
  end
end
