-- linger.lua - RELEASE ... LINGER: end a hold but keep the key taken for
-- a while, renewed by no one (issue 12; ShedLock's lock-at-least-for).
-- KEYS[1]  the lock key
-- ARGV[1]  the value the caller set: "<owner>:<token>"
-- ARGV[2]  the linger in ms (>= 1)
-- ARGV[3]  the release channel (see release.lua), ARGV[4] the lock name
-- The value becomes "<client-id>/linger:<token>": no session's owner, so
-- no renewal, release or re-acquire of the session matches it, and OWNER
-- still shows the client-id and the token.  The release channel is told,
-- though the key is not free yet: waiters elsewhere ask again and learn
-- its new, short PTTL, so they try again the moment it expires instead of
-- at the PTTL they saw before.
-- Returns 1 when done, 0 when the hold was lost.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
local owner = string.match(ARGV[1], '^[^/:]*')
local token = string.match(ARGV[1], ':(%d+)$')
redis.call('SET', KEYS[1], owner .. '/linger:' .. token, 'PX', ARGV[2])
local pub = string.sub(ARGV[3], -1) == '}' and 'SPUBLISH' or 'PUBLISH'
redis.call(pub, ARGV[3], ARGV[4])
return 1
