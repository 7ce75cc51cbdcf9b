-- owner.lua - who holds a lock, for how long, with which token.
-- KEYS[1]  the lock key
-- Returns {} when free, else {value, pttl}: value "<client-id>:<token>",
-- pttl in ms (-1 if the key has no expiry).
local v = redis.call('GET', KEYS[1])
if not v then
  return {}
end
return {v, redis.call('PTTL', KEYS[1])}
