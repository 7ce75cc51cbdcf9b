-- takeover.lua - give a resumed session the hold its earlier connection
-- had on a key, with the same token (grace sessions, RESUME).
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
-- A shared hold or a permit (a sorted set of holders, lib/holders.lua):
-- the first such holder of the session, soonest to expire first, is
-- replaced by the new value, expiring in ARGV[3] ms; the key's expiry
-- follows its last holder.
-- Returns {1, token} when taken over, {0, 0} when the key was not the
-- session's any more.
-- KEYS[2]  optional (protocol 1.2): the key's value key (value.lua).  An
--          exclusive hold's value goes on with the resumed session: its
--          TTL becomes the lock's new one, and the answer carries the text,
--          {1, token, text}, so that the broker that now renews the hold
--          keeps the value fresh beside it.
-- KEYS[3], KEYS[4]  optional (single and Sentinel mode): the key's listen
--          mark and the prefix's flag (lib/holders.lua, listen_names): set
--          for the TTL when an exclusive hold is taken over, so that the
--          broker the session left, which may still think it holds the
--          key, hears its release (and checks its copy) at once.
-- @include holders.lua
local n = #ARGV[1]

-- The token of value v if it is a hold of an earlier generation of the
-- session, else nil.
local function earlier(v)
  if string.sub(v, 1, n) ~= ARGV[1] then
    return nil
  end
  local rest = string.sub(v, n + 1)
  local gen, token = string.match(rest, '^/(%d+):(%d+)$')
  if not gen then
    gen = '1'
    token = string.match(rest, '^:(%d+)$')
  end
  if not token or tonumber(gen) >= tonumber(ARGV[2]) then
    return nil
  end
  return token
end

local k = KEYS[1]
local v = get_str(k)
if v == nil and redis.call('TYPE', k).ok == 'zset' then
  local now = now_ms()
  if prune(k, now) == 0 then
    return {0, 0}
  end
  for _, m in ipairs(redis.call('ZRANGEBYSCORE', k, '(0', '+inf')) do
    local token = earlier(m)
    if token then
      local newv = ARGV[1] .. '/' .. ARGV[2] .. ':' .. token
      redis.call('ZREM', k, m)
      redis.call('ZADD', k, num(now + tonumber(ARGV[3])), newv)
      settle(k)
      return {1, tonumber(token)}
    end
  end
  return {0, 0}
end
local token = v and earlier(v)
if not token then
  return {0, 0}
end
redis.call('SET', k, ARGV[1] .. '/' .. ARGV[2] .. ':' .. token, 'PX', ARGV[3])
if KEYS[4] then
  redis.call('SET', KEYS[3], '1', 'PX', ARGV[3])
  flag_for(KEYS[4], tonumber(ARGV[3]))
end
local text = KEYS[2] and value_of(KEYS[2], v) or ''
if text ~= '' then
  redis.call('PEXPIRE', KEYS[2], ARGV[3])
  return {1, tonumber(token), text}
end
return {1, tonumber(token)}
