-- locks.lua - one page of LOCKS (the admin view): the holders of lock
-- keys, found with SCAN, never KEYS (which would hold Redis for the whole
-- keyspace at once).  Read only.
-- KEYS     none: SCAN finds them.  In cluster mode the function reads the
--          keys of every slot its master serves (allow-cross-slot-keys),
--          and a key of a slot the master does not own (one being
--          imported) is skipped: every read is a pcall.
-- ARGV[1]  the MATCH pattern: "<prefix>:lock:" escaped, then the glob
-- ARGV[2]  the length of "<prefix>:lock:", cut off the names
-- ARGV[3]  the SCAN cursor to start at
-- ARGV[4]  resume: the key hash after which to go on ("": the batch's
--          first key), ARGV[5] and the last token listed of that key
-- ARGV[6]  the most holders to list
-- ARGV[7]  the most SCAN calls
-- ARGV[8]  SCAN's COUNT: the same for every page (a LIMIT may change
--          from page to page), so that a page that goes on inside a
--          batch gets that batch again from SCAN
-- A page ends when it has listed ARGV[6] holders, made ARGV[7] calls, or
-- SCAN said it is done.  Within one SCAN call's batch, keys go in the
-- order of their "key hash" (the first 16 hex digits of the SHA1 of their
-- name), and a key's holders by token, so a page that ends inside a
-- batch can say where: the next page calls SCAN with the batch's cursor
-- again and goes on after that key hash and token.  (Two keys of one
-- batch with the same 64-bit hash would share the resume point.)
-- Returns {cursor, hash, token, now, e...}: where the next page starts
-- (hash "": at SCAN cursor `cursor`, "0" when this master is done; else
-- that cursor's batch, after key hash `hash` and token `token`), Redis's
-- clock in microseconds (the age of a hold is the clock less its token,
-- which is at least the clock at its grant), then 7 elements per holder:
-- its batch's SCAN cursor, its key hash, the lock name, its kind (-1
-- exclusive, 0 shared, n permits), its value as Redis keeps it
-- ("<client-id>:<token>", "<client-id>/<gen>:<token>", a lingering
-- release's "<client-id>/linger:<token>", or bytes no broker wrote), its
-- token (0: none readable), and the ms it has left (-1: no expiry).
-- @include holders.lua
local pat, cut, cur = ARGV[1], tonumber(ARGV[2]), ARGV[3]
local rh, rt = ARGV[4], tonumber(ARGV[5]) or 0
local limit, calls, count = tonumber(ARGV[6]), tonumber(ARGV[7]), ARGV[8]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local out = {'0', '', 0, tonumber(t[1]) * 1000000 + tonumber(t[2])}
local n = 0

local function tok(v)
  return tonumber(token_of(v) or '0') or 0
end

-- The live holders of k, by token: {value, token, ms left, kind} each.
local function holders_by_token(k)
  local v = redis.pcall('GET', k)
  if type(v) == 'string' then
    local p = redis.pcall('PTTL', k)
    if type(p) ~= 'number' then
      return {}
    end
    return {{v, tok(v), p, -1}}
  end
  if type(v) ~= 'table' or not v.err then
    return {}             -- gone since SCAN saw it
  end
  local ty = redis.pcall('TYPE', k)
  if type(ty) ~= 'table' or ty.ok ~= 'zset' then
    return {}
  end
  local all = redis.pcall('ZRANGE', k, 0, -1, 'WITHSCORES')
  if type(all) ~= 'table' or all.err then
    return {}
  end
  local kind, hs = 0, {}
  for i = 1, #all, 2 do
    local m, s = all[i], tonumber(all[i + 1])
    if m == '#' then
      kind = s < 0 and -s or 0
    elseif s > now then
      hs[#hs + 1] = {m, tok(m), s - now}
    end
  end
  for _, h in ipairs(hs) do
    h[4] = kind
  end
  table.sort(hs, function(a, b)
    if a[2] ~= b[2] then
      return a[2] < b[2]
    end
    return a[1] < b[1]
  end)
  return hs
end

for _ = 1, calls do
  local r = redis.call('SCAN', cur, 'MATCH', pat, 'COUNT', count)
  local batch = {}
  for i, k in ipairs(r[2]) do
    batch[i] = {string.sub(redis.sha1hex(k), 1, 16), k}
  end
  table.sort(batch, function(a, b)
    if a[1] ~= b[1] then
      return a[1] < b[1]
    end
    return a[2] < b[2]
  end)
  for _, e in ipairs(batch) do
    if rh == '' or e[1] >= rh then
      for _, h in ipairs(holders_by_token(e[2])) do
        if not (e[1] == rh and h[2] <= rt) then
          if n == limit then
            -- full inside this batch: the next page goes on after the
            -- last holder listed
            out[1], out[2], out[3] = cur, out[#out - 5], out[#out - 1]
            return out
          end
          local x = #out
          out[x + 1], out[x + 2] = cur, e[1]
          out[x + 3], out[x + 4] = string.sub(e[2], cut + 1), h[4]
          out[x + 5], out[x + 6], out[x + 7] = h[1], h[2], h[3]
          n = n + 1
        end
      end
    end
  end
  rh, rt, cur = '', 0, r[1]
  if cur == '0' or n >= limit then
    break
  end
end
out[1] = cur
return out
