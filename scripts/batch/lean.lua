-- lean.lua - the lean exclusive batch: a run of exclusive acquires and of
-- releases of one event-loop turn in B + 4 commands for B pairs, where the
-- batch (embed.sh's run) runs acquire.lua's and release.lua's bodies, 9
-- commands a pair (docs/BENCHMARKS.md, "Issue 36").  Not a
-- script of its own: scripts/embed.sh puts it in the library (the function
-- lean_<hash>, no flags: refused under maxmemory as any write) and in the
-- batch script (ARGV[1] "@lean").  The broker builds it (daemon/store/
-- lean.c) from calls that acquire.lua and release.lua would take alone in
-- single and Sentinel mode: acquires without a value, releases of holds
-- without one; no key twice in one batch (its reads come first).
-- KEYS  the counter (<prefix>:fence), the lock delay (<prefix>:lockdelay),
--       the listen flag (<prefix>:listen), <prefix>:listenall; then each
--       release's lock key; then each acquire's lock key
-- ARGV  "@lean", a (acquires), r (releases), the wanted channel, the
--       release channel, "<broker-id> " (the announcements' start); per
--       acquire: owner, TTL ms, "1" will wait / "0", tokens to set aside;
--       per release: its value ("<client-id>:<token>")
-- What each call would pass alone and can be derived is not sent (fewer
-- words: Redis reads every word of a call, the broker writes it): a lock's
-- name is its key past "<prefix>:lock:", its watch mark
-- "<prefix>:watched:<name>", an acquire's announcement "<broker-id> <name>".
-- Single and Sentinel mode only: the derived keys are on the one master.
-- Returns one element per call, the acquires' first: a grant's token (an
-- integer), or {1, token, more} when it set tokens aside; a release's 1;
-- or, for any call the fast path does not serve, what acquire.lua or
-- release.lua answers for it (their bodies run it, unchanged): the key
-- exists (held, a remnant of the caller's own, a set of holders, bytes no
-- broker wrote), the value differs, a lock delay runs, the key is watched,
-- the counter is absent or near 2^53-1.  A refused write (OOM from a
-- script run by EVAL) is that call's error element.
-- What each saved command guarded still holds:
--   GET lock + SET   -> SET NX PX: the same "absent?" test, in the write
--   PTTL lockdelay   -> one MGET slot: it cannot change inside one run
--   GET fence, TIME, SET fence per grant -> once per batch: the tokens
--                       base+1.. (each set aside range counted in) are
--                       above the counter and >= this master's TIME in
--                       microseconds; the counter is written before any
--                       grant; Redis 7 replicates the effects (the SETs)
--   GET lock per release -> one MGET, compared in this same atomic run
--   DEL per release  -> one DEL of every matching key
--   PUBLISH released -> only where a listen or watch mark exists, or
--                       always while <prefix>:listenall does
-- A freed key whose listen mark exists may have a waiter recorded on some
-- broker (lib/holders.lua, remote_grant): it is granted to the earliest
-- in this run, and its "granted" message published instead.

-- The name of the lock key k ("<prefix>:lock:<name>"; pfx "<prefix>:").
local function lean_name(pfx, k)
  return string.sub(k, #pfx + 6)
end

-- Acquire i (1-based) of a batch of a acquires and r releases, by its own
-- script's body: its KEYS and ARGV as alone.
local function lean_acquire(KEYS, ARGV, pfx, r, i)
  local q = 7 + 4 * (i - 1)
  local key = KEYS[4 + r + i]
  local name = lean_name(pfx, key)
  return guarded(S['acquire'], {key, KEYS[1], KEYS[2],
    pfx .. 'watched:' .. name}, {ARGV[q], ARGV[q + 1], ARGV[4],
    ARGV[6] .. name, ARGV[q + 2], ARGV[q + 3]})
end

-- Tokens set aside after a grant: its "reserve" word, capped as
-- next_tokens caps it ("0", the common case, without tonumber).
local function lean_more(word)
  if word == '0' then
    return 0
  end
  return math.max(0, math.min(tonumber(word) or 0, 32))
end

local function lean(KEYS, ARGV)
  local a, r = tonumber(ARGV[2]), tonumber(ARGV[3])
  local pfx = string.sub(KEYS[1], 1, -6)
  local out = {}
  -- every read in one command: counter, delay, flags, released keys
  local got = redis.call('MGET', unpack(KEYS, 1, 4 + r))
  local heard, all = got[3] or got[4], got[4]
  -- the counter's value while this call knows it (remote grants read it
  -- otherwise): as read, as written, nil once a full body may change it
  local fence = got[1] or nil

  if a > 0 then
    local last = not got[2] and tonumber(got[1])
    local base, total
    if last then
      local t = redis.call('TIME')
      base = math.max(last, tonumber(t[1]) * 1000000 + tonumber(t[2]) - 1)
      total = a
      for q = 10, 6 + 4 * a, 4 do
        total = total + lean_more(ARGV[q])
      end
      if base + total >= 9007199254740991 then
        last = nil      -- the full body answers the exhausted counter
      end
    end
    local watched = {}
    if last and heard then
      local marks = {}
      for i = 1, a do
        marks[i] = pfx .. 'watched:' .. lean_name(pfx, KEYS[4 + r + i])
      end
      watched = redis.call('MGET', unpack(marks))
    end
    local fenced = last and redis.pcall('SET', KEYS[1], num(base + total))
    fence = last and base + total or nil
    if fenced and fenced.err then
      for i = 1, a do
        out[i] = fenced      -- a refused write (EVAL under maxmemory)
      end
    elseif not last then
      -- a lock delay runs, or the counter is absent (the first grant),
      -- not a number, or near its end: as alone, each in turn
      for i = 1, a do
        out[i] = lean_acquire(KEYS, ARGV, pfx, r, i)
      end
    else
      local tok, k, q = base, 4 + r, 3
      for i = 1, a do
        q = q + 4
        local more = lean_more(ARGV[q + 3])
        local token = tok + 1
        tok = token + more
        if watched[i] then
          out[i] = lean_acquire(KEYS, ARGV, pfx, r, i)  -- tell its watchers
          fence = nil
        else
          local s = redis.pcall('SET', KEYS[k + i], ARGV[q] .. ':' ..
            num(token), 'NX', 'PX', ARGV[q + 1])
          if not s then
            out[i] = lean_acquire(KEYS, ARGV, pfx, r, i)  -- the key exists
            fence = nil
          elseif s.err then
            out[i] = s
          elseif more > 0 then
            out[i] = {1, token, more}
          else
            out[i] = token
          end
        end
      end
    end
  end

  if r > 0 then
    local q = 6 + 4 * a
    local dels, nd = {}, 0
    for j = 1, r do
      q = q + 1
      if got[4 + j] == ARGV[q] then
        nd = nd + 1
        dels[nd] = KEYS[4 + j]
        out[a + j] = 1
      else
        -- not the caller's value (expired, taken, a set of holders...)
        out[a + j] = guarded(S['release'], {KEYS[4 + j]},
          {ARGV[q], ARGV[5], lean_name(pfx, KEYS[4 + j])})
        fence = nil
      end
    end
    if nd > 0 then
      redis.call('DEL', unpack(dels))
    end
    if nd > 0 and (heard or all) then
      -- the names only where someone may listen
      local freed, marks = {}, nil
      for f = 1, nd do
        freed[f] = lean_name(pfx, dels[f])
      end
      if heard then
        -- per key: a waiter's listen mark, a watcher's mark
        local names = {}
        for f = 1, nd do
          names[2 * f - 1] = pfx .. 'listen:' .. freed[f]
          names[2 * f] = pfx .. 'watched:' .. freed[f]
        end
        -- (a mark stays until it runs out: a waiter whose attempt was in
        -- flight when this message came may miss it, and hears the next
        -- release; ACQUIRE ALL's waits do so, multi.c)
        marks = redis.call('MGET', unpack(names))
      end
      for f = 1, nd do
        local waits, granted = marks and marks[2 * f - 1], false
        if waits then
          granted, fence = remote_grant(pfx, dels[f], freed[f], ARGV[5],
            fence, marks[2 * f])
        end
        if granted then
          -- granted to a waiter recorded elsewhere: its own message
        elseif all or (marks and (waits or marks[2 * f])) then
          publish(ARGV[5], freed[f])
        end
      end
    end
  end
  return out
end
