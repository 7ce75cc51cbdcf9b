-- renew.lua - extend many locks of one broker in one call.
-- KEYS[1..n]      the lock keys
-- ARGV[1..n]      the value each should hold: "<client-id>:<token>"
-- ARGV[n+1..2n]   the TTL in ms to set on each
-- Returns an array of n integers: 1 renewed, 0 lost (gone or another's).
local n = #KEYS
local out = {}
for i = 1, n do
  if redis.call('GET', KEYS[i]) == ARGV[i] then
    redis.call('PEXPIRE', KEYS[i], ARGV[n + i])
    out[i] = 1
  else
    out[i] = 0
  end
end
return out
