-- kill.lua - KILL <client-id> (the admin view), on the session's record
-- key, whose slot's release channel carries the messages about it.
-- KEYS[1]  the record, <prefix>:session:<client-id> (session.lua)
-- ARGV[1]  the operation:
--   say  ARGV[2] the release channel of the record's slot (SPUBLISH in
--        cluster mode), ARGV[3] the message: "kill <client-id>
--        <request>" from the asking broker, for whichever broker has the
--        session; "killed <request> 1" from that broker once it ended it.
--        A lock name has no blank, so brokers older than KILL take
--        neither for a key.  Returns 1.
--   end  ARGV[2] PX of the tombstone: no broker answered, so none has the
--        session (its broker died): end a live record (attached or
--        detached) as QUIT ends it, with the tombstone session.lua's
--        "end" writes (state "ended", the generation kept): a later
--        RESUME answers that the session ended.  Returns {gen, key...}:
--        its generation and the keys the record lists, which the caller
--        frees by owner (forget.lua: in cluster mode they live in other
--        slots); {} when there is no live record.
local rec = KEYS[1]
if ARGV[1] == 'say' then
  local pub = string.sub(ARGV[2], -1) == '}' and 'SPUBLISH' or 'PUBLISH'
  redis.call(pub, ARGV[2], ARGV[3])
  return 1
end
local h = redis.call('HMGET', rec, 'gen', 'state')
if not h[1] or h[2] == 'ended' or h[2] == 'expired' then
  return {}
end
local out = {tonumber(h[1])}
for _, f in ipairs(redis.call('HKEYS', rec)) do
  if string.sub(f, 1, 2) == 'k:' then
    out[#out + 1] = string.sub(f, 3)
  end
end
redis.call('DEL', rec)
redis.call('HSET', rec, 'state', 'ended', 'gen', h[1])
redis.call('PEXPIRE', rec, ARGV[2])
return out
