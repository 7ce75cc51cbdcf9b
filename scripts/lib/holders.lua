-- holders.lua - shared locks and semaphores: the holders of one key.  Not
-- a script of its own: scripts/embed.sh puts it where a script
-- says "-- @include holders.lua".
-- A shared lock or a semaphore is a sorted set under the lock key's own
-- name (<prefix>:lock:<name>: cluster mode routes it by that name's slot,
-- like an exclusive lock's string).  Members:
--   "#"                score 0 (a shared lock) or -n (a semaphore of n
--                      permits): the key's kind
--   "<owner>:<token>"  one per holder, the value an exclusive lock stores,
--                      scored by its expiry: absolute ms of Redis's TIME
-- The key itself expires (PEXPIREAT) with its last holder, so the holders
-- of a broker that died vanish on their own, and a key with no live holder
-- left is deleted.  A holder whose score has passed is expired: scripts
-- prune them before they look (the "#" member, scored <= 0, never is).
-- Scores are whole ms far below 2^53: a double holds them exactly; they
-- are written with %d (Lua's default format would write 1e+14 past 14
-- digits).

-- Redis's clock in ms (t: a TIME answer already read, nil to read one).
-- Redis 7 replicates a script's effects, not the script, so TIME before a
-- write is allowed.
local function now_ms(t)
  t = t or redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local function num(x)
  return string.format('%d', x)
end

-- The owner part of a value "<owner>:<token>" (nil if not that shape).
local function owner_of(v)
  return string.match(v, '^(.*):%d+$')
end

-- The token part of a value "<owner>:<token>", as a string (nil if not
-- that shape).
local function token_of(v)
  return string.match(v, ':(%d+)$')
end

-- PUBLISH, or SPUBLISH for cluster mode's per-slot channel ("...{tag}").
local function publish(chan, msg)
  local pub = string.sub(chan, -1) == '}' and 'SPUBLISH' or 'PUBLISH'
  redis.call(pub, chan, msg)
end

-- The kind a zset key stores: 0 shared, n > 0 a semaphore of n permits.
-- A set with no "#" (no script writes one) reads as shared.
local function kind_of(k)
  local s = tonumber(redis.call('ZSCORE', k, '#') or '0')
  if s < 0 then
    return -s
  end
  return 0
end

-- Live holders of k (after a prune: every holder).
local function count(k)
  return redis.call('ZCOUNT', k, '(0', '+inf')
end

-- Make the key's expiry its last holder's, or delete it when none is
-- left.  Returns the holders left.
local function settle(k)
  local n = count(k)
  if n == 0 then
    redis.call('DEL', k)
    return 0
  end
  local top = redis.call('ZRANGE', k, -1, -1, 'WITHSCORES')
  redis.call('PEXPIREAT', k, num(tonumber(top[2])))
  return n
end

-- Remove expired holders (0 < score <= now); delete the key if none is
-- left.  Returns the live holders.
local function prune(k, now)
  redis.call('ZREMRANGEBYSCORE', k, '(0', num(now))
  local n = count(k)
  if n == 0 then
    redis.call('DEL', k)
  end
  return n
end

-- Remove every holder whose owner is owner (any token).  Returns how many.
local function remove_owner(k, owner)
  local gone = 0
  for _, m in ipairs(redis.call('ZRANGE', k, 0, -1)) do
    if m ~= '#' and owner_of(m) == owner then
      redis.call('ZREM', k, m)
      gone = gone + 1
    end
  end
  return gone
end

-- Is v a live holder of k?  (Expired ones are pruned, so: present.)
local function holds(k, v, now)
  local s = redis.call('ZSCORE', k, v)
  return v ~= '#' and s and tonumber(s) > now
end

-- The same, after pruning k's expired holders (the key is deleted when
-- none is left): what a release, renewal or handoff of v checks first.
local function live(k, v, now)
  return prune(k, now) > 0 and holds(k, v, now)
end

-- The value of k when it is a string (an exclusive lock), false when k is
-- absent, nil when it is of another type (a set of holders, or bytes no
-- broker wrote: ask TYPE).  One command where TYPE then GET took two, on
-- the exclusive path every lock takes.
local function get_str(k)
  local v = redis.pcall('GET', k)
  if type(v) == 'table' then
    return nil          -- WRONGTYPE
  end
  return v
end

-- A lingering release's value ("<client-id>/linger:<token>", linger.lua):
-- the key stays taken, but its hold has ended.
local function lingering(value)
  return string.find(value, '/linger:', 1, true) ~= nil
end

-- Is the hold that token want (decimal, as the scripts write tokens)
-- names alive in k now?  Alive: the exclusive holder's value ends
-- ":<want>", or a live holder of a shared lock or a semaphore does; a
-- lingering release is no live hold.  Returns true, or false and the
-- current token: the exclusive holder's, the newest live one of a shared
-- lock or a semaphore, -1 when no hold is alive (the key is free, holds
-- bytes no broker wrote, or a RELEASE ... LINGER keeps it).  Tokens are
-- compared as the strings the scripts write (%d), never as numbers.  Read
-- only: expired holders are skipped, not removed.  CHECK asks it, and a
-- fenced write before it writes (check.lua, setif.lua, delif.lua).
local function hold_alive(k, want)
  local v = get_str(k)
  if v and lingering(v) then
    return false, -1
  end
  if v then
    local t = token_of(v)
    if t == want then
      return true
    end
    return false, t and tonumber(t) or -1
  end
  if v == false or redis.call('TYPE', k).ok ~= 'zset' then
    return false, -1
  end
  local newest = -1
  for _, m in ipairs(redis.call('ZRANGEBYSCORE', k, '(' .. num(now_ms()),
      '+inf')) do
    local t = not lingering(m) and token_of(m)
    if t == want then
      return true
    end
    if t and tonumber(t) > newest then
      newest = tonumber(t)
    end
  end
  return false, newest
end

-- A new fencing token from counter, and up to extra more set aside right
-- after it (the broker hands them out itself, in order, to its own waiters
-- for this key: early hand-off; fewer near the end), or nil when the
-- counter has reached 2^53-1, the largest integer a Lua number (a double)
-- holds exactly: no token is left (see acquire.lua), and nothing was
-- written.  Returns the token and how many were set aside after it.
-- Tokens follow the clock: a token is never below this master's TIME in
-- microseconds, so the tokens two masters grant for one key on the two
-- sides of a split brain (or across a failover that lost the counter)
-- still rise in real time, to within the Redis hosts' clock skew; the
-- counter itself only ever rises.  TIME before the write: Redis 7
-- replicates a script's effects, not the script.
-- known: the counter's value when the caller read it already (one MGET
-- with the other keys it reads), nil to read it here.  MGET shows a key
-- of another type as absent: an absent counter (the very first grant) is
-- read again with GET, which refuses one no broker wrote (WRONGTYPE)
-- rather than grant from a counter it cannot read.
local function next_tokens(counter, extra, known, t)
  if not known then
    known = redis.call('GET', counter)
  end
  local last = tonumber(known or '0') or 0
  t = t or redis.call('TIME')
  local clock = tonumber(t[1]) * 1000000 + tonumber(t[2])
  local base = math.max(last, clock - 1)
  if base >= 9007199254740991 then
    return nil, 0
  end
  local more = math.max(0, math.min(tonumber(extra) or 0, 32,
    9007199254740991 - base - 1))
  redis.call('SET', counter, string.format('%d', base + 1 + more))
  return base + 1, more
end

local function next_token(counter)
  return (next_tokens(counter, 0))
end

-- Add (or move) holder v, expiring at now + ttl_ms, to a key of kind
-- (0 shared, n permits), made if absent; then fix the key's expiry.
local function hold(k, v, now, ttl_ms, kind)
  redis.call('ZADD', k, 'NX', num(-kind), '#')
  redis.call('ZADD', k, num(now + tonumber(ttl_ms)), v)
  settle(k)
end

-- Tell the key's watchers that its holders or its value changed: while
-- the watch mark exists (watch.lua), "held <name>" on the release channel
-- (a lock name has no blank, so no broker takes it for a release of
-- one; brokers with watchers read the key again: the message says only
-- that something changed).  A release needs no such message: its own
-- "<name>" on that channel is news for watchers too.
local function changed(mark, chan, name)
  if mark and redis.call('EXISTS', mark) == 1 then
    publish(chan, 'held ' .. name)
  end
end

-- Cluster mode's grant scripts name the slot's keys, whose names end in
-- the slot's tag ("...{<tag>}"): the fencing counter is KEYS[2] in each.
local function sharded(counter)
  return string.sub(counter, -1) == '}'
end

-- Listen marks (single and Sentinel mode).  The lean release (batch/
-- lean.lua) publishes a key's release only while someone elsewhere may
-- listen for it: "<prefix>:listen:<name>" (a waiter on some broker found
-- the key held and waits, or a RESUME moved the key's hold away from a
-- broker that may still think it holds it), "<prefix>:watched:<name>"
-- (WATCH), or "<prefix>:listenall" (a broker that sets no marks shares the
-- prefix: announce.lua).  "<prefix>:listen" lives at least as long as any
-- listen or watch mark, so a batch that finds it absent reads no mark.
-- The names are made from the counter's, "<prefix>:fence" in these modes
-- (cluster mode sets no marks: its releases publish as before).
local function listen_names(counter, name)
  local p = string.sub(counter, 1, -6)
  return p .. 'listen', p .. 'listen:' .. name
end

-- Keep the flag k alive ms more at least (never shortened: it outlives
-- every mark set under it).
local function flag_for(k, ms)
  if redis.call('PTTL', k) < ms then
    redis.call('SET', k, '1', 'PX', ms)
  end
end

-- LISTEN_MS past the holder's PTTL: the waiter's broker tries again when
-- that PTTL runs out (grant.c, lock_retry_at), and sets the mark again
-- then if the key is still held, so the mark outlives the retry timer
-- that covers a lost mark.  A key with no expiry (PTTL -1): LISTEN_MS.
local LISTEN_MS = 1000

-- A waiter on some broker listens for name's release (the caller found it
-- held, pttl as PTTL said, and will wait): in the same call as that
-- finding, so no release can slip between the two.  Nothing in cluster
-- mode (counter sharded).
local function listen(counter, name, pttl)
  if sharded(counter) then
    return
  end
  local ms = (pttl > 0 and pttl or 0) + LISTEN_MS
  local flag, mark = listen_names(counter, name)
  redis.call('SET', mark, '1', 'PX', ms)
  flag_for(flag, ms)
end

-- A grant's watchers and value (protocol 1.2), the optional keys after a
-- script's own (nk of them) and the optional argument after its own (na):
-- the key's watch mark, then its value key when the call writes or
-- deletes a value; the value text (absent: none, and the value key, if
-- given, is deleted: the value of the hold this one replaces).  All nil
-- when the caller gave none, as brokers and tests of scripts before 1.2
-- did.  Multiple values, no table: this runs on every grant.  keys, argv:
-- the script's KEYS and ARGV (a library function sees no script's own: in
-- a batch each call's are parameters).
local function grant_extras(keys, argv, nk, na)
  return keys[nk + 1], keys[nk + 2], argv[na + 1]
end

-- The release channel and the lock name from a grant's announcement on
-- the wanted channel ("<prefix>:wanted[:{<tag>}]", "<broker-id> <name>" or
-- "<broker-id>+<name>", 36 bytes of id): what a grant of a watched key
-- publishes on, and names, without two more arguments on every grant.
local function channel_of(wanted, announcement)
  return (string.gsub(wanted, ':wanted(:?{?%w*}?)$', ':released%1')),
    string.sub(announcement, 38)
end

-- Cluster mode: whether the watch mark of name exists, read without the
-- call naming it (chan: the slot's release channel, "<prefix>:released:
-- {<tag>}"; the mark is "<prefix>:watched:{<tag>}<name>", in the same
-- slot).  A call that names a key absent here while its slot migrates is
-- refused (TRYAGAIN) for as long as the migration lasts, even when the
-- keys it needs are here; read unnamed, the mark's EXISTS fails instead
-- (the slot migrates, and the mark is not here): watchers are told then,
-- which is only one message too many.
local function watched_unnamed(chan, name)
  local m = string.gsub(chan, ':released:{(%w*)}$', ':watched:{%1}')
  local n = redis.pcall('EXISTS', m .. name)
  if type(n) == 'table' then
    return true
  end
  return n == 1
end

-- After a grant of token (exclusive, TTL ttl ms): its value text written
-- in the same call, or the value key vk deleted (the replaced hold's);
-- watchers told when the mark was seen (the caller read it with its other
-- reads).
local function granted(vk, text, token, ttl, seen, chan, name)
  if vk then
    if text and text ~= '' then
      redis.call('SET', vk, num(token) .. ' ' .. text, 'PX', ttl)
    else
      redis.call('DEL', vk)
    end
  end
  if seen then
    publish(chan, 'held ' .. name)
  end
end

-- The value text of the exclusive hold whose value is v, from the key's
-- value vk ("<token> <text>", value.lua), or "" when it has none: a
-- value of another token is a remnant of a hold that ended.
local function value_of(vk, v)
  local t = token_of(v)
  local s = redis.call('GET', vk)
  if not (s and t) then
    return ''
  end
  local vt, text = string.match(s, '^(%d+) (.+)$')
  if vt ~= t then
    return ''
  end
  return text
end

-- Who holds k (owner.lua's answer, which it documents), read only.
local function holders_of(k)
  local v = get_str(k)
  if v == false then
    return {}
  end
  if v then
    return {v, redis.call('PTTL', k)}
  end
  if redis.call('TYPE', k).ok ~= 'zset' then
    return {'?', redis.call('PTTL', k)}
  end
  local now = now_ms()
  local from = '(' .. num(now)
  local total = redis.call('ZCOUNT', k, from, '+inf')
  if total == 0 then
    return {}
  end
  local out = {kind_of(k), total}
  local shown = redis.call('ZRANGEBYSCORE', k, from, '+inf', 'WITHSCORES',
    'LIMIT', 0, 16)
  for i = 1, #shown, 2 do
    out[#out + 1] = shown[i]
    out[#out + 1] = tonumber(shown[i + 1]) - now
  end
  return out
end

-- Remote grants: the cross-broker hand-off in one round trip.  A broker
-- whose exclusive single-key waiter found the key held elsewhere records
-- it (rwait.lua) in "<prefix>:rwait:<name>", a sorted set: member
-- "<broker-id> <wait-id> <ttl> <owner>[ <value>]", scored by the Redis ms
-- of its first record (FIFO by the wait's start).  A release that frees
-- the key (release.lua, the lean batch) grants it to the earliest record
-- of a broker still announced with the "grants" feature (announce.lua)
-- whose channel "<prefix>:granted:<broker-id>" somebody hears, with a new
-- token from the counter (as handoff.lua: the releasing hold was alive,
-- so no lock delay) and the waiter's value written in the same call (so
-- no reader sees the new holder without it): "<name> <wait-id> <owner>
-- <token> <ms>" on that channel, ms the grant's time by Redis's clock
-- (watchers hear "held <name>" on the release channel).  A broker killed
-- -9 has lost its connections: its message would reach nobody (PUBLISH
-- counts the receivers), so nothing is granted to it and the next record
-- is tried.  The grant's PX is the waiter's TTL but at most
-- REMOTE_GRANT_MS: the waiting broker renews it at once when it delivers
-- the grant, and releases it at once when it cannot (the wait ended, was
-- cancelled); one that hangs never renews it, and the key is free again
-- REMOTE_GRANT_MS later instead of a whole TTL.  Records of brokers no
-- longer announced are dropped on the way.  Cluster mode (chan ends in
-- "}") records nothing and grants nothing.
local REMOTE_GRANT_MS = 2000

-- Brokers announced alive (<prefix>:brokers) with feature "grants".
local function granting_brokers(p, now)
  local live = {}
  for _, m in ipairs(redis.call('ZRANGEBYSCORE', p .. 'brokers',
      '(' .. num(now), '+inf')) do
    local id, features = string.match(m, '^(%S+) %S+ (%S+)$')
    if id and string.find(',' .. features .. ',', ',grants,', 1, true) then
      live[id] = true
    end
  end
  return live
end

-- k (lock name) was just freed (deleted) by its holder's release: grant
-- it to the earliest live remote record, if any.  p: "<prefix>:"; chan:
-- the release channel; fence: the counter's value if the caller read it
-- in this call (nil: read here); watched: name's watch mark as the
-- caller read it (false: absent; nil: read here).  Returns true when
-- granted (the key is taken again: no release to publish), and the
-- counter's value as known now (nil: unknown).
local function remote_grant(p, k, name, chan, fence, watched)
  if string.sub(chan, -1) == '}' then
    return false, fence
  end
  local rq = p .. 'rwait:' .. name
  local e = redis.call('ZPOPMIN', rq)[1]
  if not e then
    return false, fence
  end
  local t = redis.call('TIME')
  local now = now_ms(t)
  local live = granting_brokers(p, now)
  while e do
    local bid, wid, ttl, owner, text = string.match(e,
      '^(%S+) (%d+) (%d+) (%S+) ?(%S*)$')
    if bid and live[bid] then
      local token = next_tokens(p .. 'fence', 0, fence, t)
      if not token then
        return false, fence
      end
      fence = token
      -- (heard by nobody: that broker's connections are gone)
      if redis.call('PUBLISH', p .. 'granted:' .. bid, name .. ' ' ..
          wid .. ' ' .. owner .. ' ' .. num(token) .. ' ' .. num(now)) > 0
      then
        local px = num(math.max(1, math.min(tonumber(ttl),
          REMOTE_GRANT_MS)))
        redis.call('SET', k, owner .. ':' .. num(token), 'PX', px)
        if text ~= '' then
          redis.call('SET', p .. 'value:' .. name, num(token) .. ' ' ..
            text, 'PX', px)
        end
        if watched == nil then
          watched = redis.call('EXISTS', p .. 'watched:' .. name) == 1
        end
        if watched then
          publish(chan, 'held ' .. name)
        end
        return true, fence
      end
    end
    e = redis.call('ZPOPMIN', rq)[1]
  end
  return false, fence
end
