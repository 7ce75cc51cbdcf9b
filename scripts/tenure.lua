-- tenure.lua - join the current master's tenure; start it if it is new.
-- Run on every new command connection, after the role check and before
-- any grant.
-- KEYS[1]  the fencing counter (<prefix>:fence)
-- KEYS[2]  the tenure: the replication id of the master it began on
--          (<prefix>:tenure)
-- KEYS[3]  the lock delay (<prefix>:lockdelay), a key with a PX TTL
-- ARGV[1]  this master's replication id (INFO replication master_replid)
-- ARGV[2]  the replication id this broker last worked on ("" for none)
-- ARGV[3]  the lock delay in ms (0: none)
-- Returns {new, delay_left}: new is 1 when this call started the tenure;
-- delay_left the ms left of the lock delay (0: none).
-- A new replication id means a promoted replica (a failover) or a Redis
-- that restarted without its data: writes of the old tenure may be lost,
-- the fencing counter among them.  So the counter is raised to the
-- server's TIME in microseconds, which no run of grants under an earlier
-- tenure can have passed (the counter rises by one per grant, 33 for a
-- grant that sets tokens aside for early hand-offs: by at most one per
-- microsecond on average, and the new master's clock has moved on by at
-- least the failover time): tokens never go back.  The lock delay keeps keys that look free from being granted
-- while the brokers that held them reclaim them (reassert.lua); it starts
-- only when an earlier tenure is known (recorded here, or seen by this
-- broker), not on a fresh Redis.
local cur = redis.call('GET', KEYS[2])
local new = 0
if cur ~= ARGV[1] then
  new = 1
  redis.call('SET', KEYS[2], ARGV[1])
  local t = redis.call('TIME')
  local floor = tonumber(t[1]) * 1000000 + tonumber(t[2])
  local c = tonumber(redis.call('GET', KEYS[1]) or '0')
  if c == nil or c < floor then
    redis.call('SET', KEYS[1], string.format('%d', floor))
  end
  if tonumber(ARGV[3]) > 0 and (cur or (ARGV[2] ~= '' and ARGV[2] ~= ARGV[1])) then
    redis.call('SET', KEYS[3], ARGV[1], 'PX', ARGV[3])
  end
end
local left = redis.call('PTTL', KEYS[3])
if left < 0 then
  left = 0
end
return {new, left}
