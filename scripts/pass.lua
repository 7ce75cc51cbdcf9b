-- pass.lua - bring Redis up to date with a hand-off the broker made on its
-- own (issue 14): the key went from one local holder to the next, who was
-- told OK before this call was sent.
-- KEYS[1]  the lock key
-- ARGV[1]  the releasing hold's value, exactly as the broker wrote it
--          ("<client-id>:<token>", a resumed session's "<id>/<gen>:<token>")
-- ARGV[2]  the new holder's value
-- ARGV[3]  its TTL in ms
-- Returns 1 when the key showed the releasing hold, or the new one already
-- (this call run again after a lost reply), and now shows the new one with
-- its TTL set anew; 0 (absent) or 3 (anything else: another's) when it
-- does not, and nothing is written:
-- the key expired, was deleted or taken, or the releasing hold was resumed
-- on another broker (takeover.lua wrote another value with the same
-- token), and the new holder lost it.  Values are compared whole, never by
-- token alone: only then is the hold passed on still this broker's.
-- Its one write is the SET: a call refused (OOM, READONLY) changed nothing.
-- @include holders.lua
local v = get_str(KEYS[1])
if v ~= ARGV[1] and v ~= ARGV[2] then
  return v == false and 0 or 3
end
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
return 1
