-- takeover.lua - give a resumed session the hold its earlier connection
-- had on a key, with the same token (issue 12).
-- KEYS[1]  the lock key
-- ARGV[1]  the session's client-id
-- ARGV[2]  the resumed session's generation (>= 2)
-- ARGV[3]  the TTL in ms to set
-- The value "<client-id>:<token>" (generation 1) or
-- "<client-id>/<gen>:<token>" of any earlier generation becomes
-- "<client-id>/<ARGV[2]>:<token>": the connection it replaced compares
-- exact values, so its renewals and releases fail from now on, whatever
-- its broker still believes.  Anything else (expired, another's, a later
-- generation's, a lingering release) is left alone.
-- Returns {1, token} when taken over, {0, 0} when the key was not the
-- session's any more.
local v = redis.call('GET', KEYS[1])
if not v then
  return {0, 0}
end
local n = #ARGV[1]
if string.sub(v, 1, n) ~= ARGV[1] then
  return {0, 0}
end
local rest = string.sub(v, n + 1)
local gen, token = string.match(rest, '^/(%d+):(%d+)$')
if not gen then
  gen = '1'
  token = string.match(rest, '^:(%d+)$')
end
if not token or tonumber(gen) >= tonumber(ARGV[2]) then
  return {0, 0}
end
redis.call('SET', KEYS[1], ARGV[1] .. '/' .. ARGV[2] .. ':' .. token,
  'PX', ARGV[3])
return {1, tonumber(token)}
