-- watch.lua - mark a key watched and read what a watcher is shown (WATCH,
-- OWNER ... VALUE).
-- KEYS[1]  the lock key
-- KEYS[2]  the key's value (see value.lua)
-- KEYS[3]  the key's watch mark, <prefix>:watched:<name> (in cluster mode
--          <prefix>:watched:{<tag>}<name>: in the lock's slot): while it
--          exists, scripts that change the key's holders tell the change
--          on the release channel (lib/holders.lua, changed)
-- ARGV[1]  the mark's TTL in ms: a broker with watchers on the key calls
--          this again before it runs out; "0" reads without marking
-- KEYS[4]  optional (single and Sentinel mode): the prefix's listen flag,
--          <prefix>:listen, kept alive as long as the mark at least, so
--          that lean releases read the key's marks and publish its release
--          (lib/holders.lua, listen_names)
-- Returns what owner.lua returns (holders_of in lib/holders.lua), and for
-- a key held exclusive a third element: the holder's value text, or ""
-- when it has none (a value is never empty).  Marking writes only the
-- mark, with its TTL; a broker that died leaves a mark that runs out.
-- @include holders.lua
if tonumber(ARGV[1]) > 0 then
  redis.call('SET', KEYS[3], '1', 'PX', ARGV[1])
  if KEYS[4] then
    flag_for(KEYS[4], tonumber(ARGV[1]))
  end
end
local out = holders_of(KEYS[1])
if #out == 2 then
  out[3] = value_of(KEYS[2], out[1])
end
return out
