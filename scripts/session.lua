-- session.lua - a grace session's record (issue 12): the one place where
-- "which connection owns this client-id" is decided, atomically.
-- KEYS[1]  the record, <prefix>:session:<client-id>, a hash:
--            secret  SHA1 of the resume secret (hex)
--            gen     the generation: 1, then +1 per RESUME
--            state   attached | detached | expired
--            broker  the id of the broker that owns it now
--            grace   the grace in ms
--            app     the app of its session ("" none; issue 15's access
--                    lists): only a session of the same app resumes it
--            k:<key> "<holds> <ttl-ms>" for each key the session holds
--            w:<key> "<kind> <ttl-ms> <deadline>" for each ACQUIRE ...
--                    ASYNC wait it has queued (protocol 1.2): kind as in
--                    a hold, deadline in Unix ms; a RESUME queues it again
--            v:<key> "1" for each key it watches (WATCH, protocol 1.2):
--                    a RESUME watches it again
-- ARGV[1]  the operation, below; ARGV[2] the caller's generation
-- A broker acts on the record only while the generation is its own: a
-- RESUME raises it, and from then on every write of the connection it
-- replaced is refused, so a resume and the grace's end (or a QUIT, or a
-- late write of the old broker) can never both win.
--   write  ARGV[3] secret, ARGV[4] grace, ARGV[5] PX, ARGV[6] broker,
--          ARGV[7] state (attached: HELLO GRACE, a resume, a record
--          Redis lost; detached: the connection ended without QUIT),
--          ARGV[8] the app, ARGV[9..] key/value pairs: the whole record,
--          made if absent.
--   touch  ARGV[3] PX: keep an attached record alive.
--   key    ARGV[3] key, ARGV[4] value ("" deletes): one key changed.
--   wait   ARGV[3] key, ARGV[4] value ("" deletes): one queued wait.
--   watch  ARGV[3] key, ARGV[4] "1" watched ("" deletes): one watch.
--   end    ARGV[3] PX of the tombstone, ARGV[4] its state: "ended"
--          (QUIT) or "expired" (the grace ran out).  The tombstone keeps
--          the generation: a connection the session left behind still
--          open somewhere learns at its next touch that it is over (and
--          does not write the record again), and a late RESUME hears why.
--   resume ARGV[2] the secret (not a generation), ARGV[3] the broker,
--          ARGV[4] PX to add to the grace, ARGV[5] the resuming session's
--          app: take the session over.
--   check  nothing written: is the record still the caller's?  (A lock
--          of the session was found gone: resumed elsewhere, or lost?)
--   reclaim  as write, but only when Redis lost the record (a restart
--          without persistence, a failover): the broker writes it again
--          with its generation and secret when it reclaims the locks;
--          a record that is there is left alone.
-- Returns for write/touch/key/end/check: 1 done, 0 the record belongs
-- to a later generation (resumed elsewhere), -1 no record (end: 1);
-- reclaim: 1 the record was there, 2 written again, 0 as above.
-- A record of an earlier generation than the caller's can only be one
-- that Redis lost and a connection the session had left behind wrote
-- back (a RESUME always raises the generation of the record it finds):
-- the caller's generation wins, as if the record were absent (end writes
-- its tombstone over it).
-- For resume: {1, gen, grace, key, value, ..., "", "", key, wait, ...,
-- "", "", key, "1", ...} (the holds, then after an empty pair the queued
-- waits, then after another the watched keys: each empty pair is there
-- when anything follows it), or {-1} no record,
-- {-2} expired, {-3} wrong secret, {-4} ended by QUIT, {-5} the session
-- is another app's (a record an older broker wrote has no app: no app's).
local rec = KEYS[1]
local op = ARGV[1]

local function set_keys(first)
  local old = redis.call('HKEYS', rec)
  for _, f in ipairs(old) do
    if string.sub(f, 1, 2) == 'k:' then
      redis.call('HDEL', rec, f)
    end
  end
  for i = first, #ARGV, 2 do
    redis.call('HSET', rec, 'k:' .. ARGV[i], ARGV[i + 1])
  end
end

if op == 'resume' then
  local h = redis.call('HMGET', rec, 'secret', 'gen', 'state', 'grace',
    'app')
  if h[3] == 'expired' then
    return {-2}
  end
  if h[3] == 'ended' then
    return {-4}
  end
  if not h[2] then
    return {-1}
  end
  if h[1] ~= redis.sha1hex(ARGV[2]) then
    return {-3}
  end
  if (h[5] or '') ~= (ARGV[5] or '') then
    return {-5}
  end
  local gen = redis.call('HINCRBY', rec, 'gen', 1)
  redis.call('HSET', rec, 'state', 'attached', 'broker', ARGV[3])
  local grace = tonumber(h[4] or '0') or 0
  redis.call('PEXPIRE', rec, grace + tonumber(ARGV[4]))
  local out = {1, gen, grace}
  local all = redis.call('HGETALL', rec)
  for i = 1, #all, 2 do
    if string.sub(all[i], 1, 2) == 'k:' then
      out[#out + 1] = string.sub(all[i], 3)
      out[#out + 1] = all[i + 1]
    end
  end
  -- each section after the holds: its separator, then its pairs
  local seps = 0
  for s, prefix in ipairs({'w:', 'v:'}) do
    for i = 1, #all, 2 do
      if string.sub(all[i], 1, 2) == prefix then
        while seps < s do
          out[#out + 1] = ''
          out[#out + 1] = ''
          seps = seps + 1
        end
        out[#out + 1] = string.sub(all[i], 3)
        out[#out + 1] = all[i + 1]
      end
    end
  end
  return out
end

local gen = redis.call('HGET', rec, 'gen')
if gen and tonumber(gen) < tonumber(ARGV[2]) then
  if op == 'end' then
    gen = ARGV[2]
  else
    redis.call('DEL', rec)
    gen = nil
  end
end
if not gen then
  if op == 'write' or op == 'reclaim' then
    redis.call('HSET', rec, 'gen', ARGV[2])
  elseif op == 'end' then
    return 1
  else
    return -1
  end
else
  local state = redis.call('HGET', rec, 'state')
  if gen ~= ARGV[2] or state == 'expired' or state == 'ended' then
    return 0
  end
  if op == 'reclaim' then
    return 1
  end
end

if op == 'write' or op == 'reclaim' then
  redis.call('HSET', rec, 'secret', redis.sha1hex(ARGV[3]), 'state', ARGV[7],
    'grace', ARGV[4], 'broker', ARGV[6], 'app', ARGV[8])
  set_keys(9)
  redis.call('PEXPIRE', rec, ARGV[5])
  if op == 'reclaim' then
    return 2
  end
elseif op == 'touch' then
  redis.call('PEXPIRE', rec, ARGV[3])
elseif op == 'key' or op == 'wait' or op == 'watch' then
  local f = ({key = 'k:', wait = 'w:', watch = 'v:'})[op] .. ARGV[3]
  if ARGV[4] == '' then
    redis.call('HDEL', rec, f)
  else
    redis.call('HSET', rec, f, ARGV[4])
  end
elseif op == 'end' then
  redis.call('DEL', rec)
  redis.call('HSET', rec, 'state', ARGV[4], 'gen', gen)
  redis.call('PEXPIRE', rec, ARGV[3])
end
return 1
