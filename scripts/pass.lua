-- pass.lua - bring Redis up to date with a hand-off the broker made on its
-- own (the early hand-off): the key went from one local holder to the next, who was
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
-- Protocol 1.2, optional: KEYS[2] the watch mark, KEYS[3] the value key
-- (when either hold has a value), ARGV[4] the release channel, ARGV[5]
-- the lock name, ARGV[6] the new holder's value text (lib/holders.lua,
-- grant_extras): the new holder's value is written here (the releasing
-- hold's deleted), and watchers are told while the mark exists.  Redis
-- learns of the new holder only now, so watchers elsewhere do too.
-- Cluster mode names the lock key again in KEYS[2]: the mark is read
-- without being named (lib/holders.lua, watched_unnamed), so that a pass
-- runs while its slot migrates, as the lock key alone lets it.
-- @include holders.lua
local mark, vk, text = grant_extras(KEYS, ARGV, 1, 5)
local unnamed = mark == KEYS[1]
if unnamed then
  mark = nil
end
-- the lock and the watch mark in one read (MGET shows a set of holders
-- as absent: get_str tells them apart when it matters)
local r = redis.call('MGET', KEYS[1], mark or KEYS[1])
local v = r[1]
if v ~= ARGV[1] and v ~= ARGV[2] then
  v = get_str(KEYS[1])
  return v == false and 0 or 3
end
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
if v == ARGV[1] then
  local seen = mark and r[2]
  if unnamed then
    seen = watched_unnamed(ARGV[4], ARGV[5])
  end
  granted(vk, text, token_of(ARGV[2]), ARGV[3], seen, ARGV[4], ARGV[5])
end
return 1
