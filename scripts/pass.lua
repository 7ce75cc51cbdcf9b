-- pass.lua - bring Redis up to date with a hand-off the broker made on its
-- own (issue 14): the key went from one local holder to the next, who was
-- told OK before this call was sent.
-- KEYS[1]  the lock key
-- ARGV[1]  the chain's first token: granted by acquire.lua or handoff.lua
--          to a holder of this broker, which set aside the tokens after it
--          (ARGV[2] the last of them) for this broker and this key alone
-- ARGV[2]  the chain's last token
-- ARGV[3]  the new value, "<client-id>:<token>"
-- ARGV[4]  the new holder's token (in the chain)
-- ARGV[5]  its TTL in ms
-- Returns 1 when the key showed an older hold of the chain (the releasing
-- holder's, or one before it whose own call failed) and now shows the new
-- one, with its TTL set anew; 2 when it shows a newer hold of the chain
-- already (a call retried behind a later one, e.g. after NOSCRIPT): the
-- new holder has passed the key on, nothing to do; 0 when it shows no
-- hold of the chain: the key expired, was deleted or is another's, and
-- the new holder lost it (nothing is written).
-- Only the token is compared, not the owner: a token of the chain can be
-- in this key only because this broker put it there.
-- @include holders.lua
local v = get_str(KEYS[1])
local t = v and tonumber(string.match(v, ':(%d+)$')) or nil
local first, last = tonumber(ARGV[1]), tonumber(ARGV[2])
local new = tonumber(ARGV[4])
if t == nil or t < first or t > last then
  return 0
end
if t > new then
  return 2
end
if t == new then
  return 1
end
redis.call('SET', KEYS[1], ARGV[3], 'PX', ARGV[5])
return 1
